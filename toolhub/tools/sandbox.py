"""The box a ``bash`` command runs in: one bubblewrap (``bwrap``) sandbox per command.

What the box keeps, whatever the command does:

- **Files.** The session's workspace is the only writable host directory, bound at
  ``/workspace`` (the command's directory and HOME). Everything else in the box is
  read-only and minimal: ``/usr``, the merged-/usr links (``/bin``, ``/lib``…), three
  harmless ``/etc`` entries (``ld.so.cache``, ``alternatives``, ``localtime``), a fresh
  ``/proc`` showing only the box's processes, a minimal ``/dev``, and a private
  ``/tmp`` and ``/dev/shm`` of at most ``tmp_bytes`` each that vanish with the box. Other
  workspaces, the checkout, the var directory and ``/etc/shadow`` are not in the box at
  all. The workspace is bound through a descriptor (bwrap checks that what it mounted is
  what was opened, and closes the descriptor before the command starts); bwrap still
  resolves the path as the box's user, so that user must be able to search the
  workspace's parent directories (``launch`` and the start-up check say so when not).
- **Environment.** PATH, LANG, TERM and HOME only.
- **Namespaces.** All new (user, pid, network, ipc, uts, cgroup); the network namespace
  holds only its own loopback, so nothing on the host (Redis, PostgreSQL, daphne) and
  nothing beyond it is reachable. No capabilities, no further user namespaces.
- **Never root.** Started as root, the box runs as ``uid`` (and the same gid), which is
  given the workspace; started as anyone else, it runs as them.
- **Limits.** Set inside the box's own user namespace (``prlimit`` before the command),
  so the kernel counts the process limit per box, not for every box of that uid
  together: CPU seconds and address space per process, processes, file size, no core
  files. The caller stops a command whose output passes ``output_bytes``.
- **Dies with its owner.** ``--die-with-parent`` kills bwrap when the thread that started
  it ends, and bwrap is the box's pid 1: when it dies the kernel kills everything in the
  box, ``setsid`` or not. Each bwrap's argv[0] names its owner process (pid and start
  time), so ``reap_orphan_sandboxes`` can find and kill boxes whose owner is gone.
- **No box, no command.** ``unavailable_reason`` says why a box cannot start here
  (checked once per configuration, by starting one); nothing in this module runs a
  command outside a box.

The apps set the limits with ``configure`` from Django settings before the first command.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKSPACE = "/workspace"
MARKER = "toolhub-sandbox:"
_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC = ("ld.so.cache", "alternatives", "localtime")
_PRLIMIT = "/usr/bin/prlimit"
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb"}
_MIB = 1 << 20


class SandboxUnavailable(RuntimeError):
    """No box can start for this workspace; the message says why."""


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """What every box gets. ``output_bytes`` is enforced by the caller reading the output."""

    bwrap: str = "/usr/bin/bwrap"
    uid: int = 65534
    cpu_seconds: int = 600
    memory_bytes: int = 1024 * _MIB
    processes: int = 128
    file_bytes: int = 1024 * _MIB
    tmp_bytes: int = 256 * _MIB
    output_bytes: int = 16 * _MIB
    # Where the workspaces live, if known: the start-up check makes sure boxes reach it.
    workspace_root: Path | None = None

    def __post_init__(self) -> None:
        if self.uid == 0:
            raise ValueError("the sandbox uid must not be 0 (root)")


_config = SandboxConfig()


def configure(config: SandboxConfig) -> None:
    """Use ``config`` for every box from now on (and check the machine again)."""
    global _config
    _config = config
    unavailable_reason.cache_clear()


def config() -> SandboxConfig:
    return _config


@dataclass(frozen=True, slots=True)
class Owner:
    """A process, told apart from a later one given the same pid by its start time."""

    pid: int
    started: int

    @classmethod
    def of(cls, pid: int) -> Owner | None:
        """The live process ``pid`` (a zombie has no threads left: it counts as gone)."""
        try:
            line = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        # Fields after the command name, which may itself hold spaces and parentheses.
        fields = line.rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            return None
        return cls(pid=pid, started=int(fields[19]))

    @classmethod
    def current(cls) -> Owner:
        return _current_owner(os.getpid())

    @classmethod
    def from_marker(cls, arg0: str) -> Owner | None:
        if not arg0.startswith(MARKER):
            return None
        pid, _, started = arg0.removeprefix(MARKER).partition("@")
        if not (pid.isdigit() and started.isdigit()):
            return None
        return cls(pid=int(pid), started=int(started))

    @property
    def marker(self) -> str:
        return f"{MARKER}{self.pid}@{self.started}"

    def alive(self) -> bool:
        return Owner.of(self.pid) == self


@functools.cache
def _current_owner(pid: int) -> Owner:
    # Keyed by pid: a forked worker child is an owner of its own.
    owner = Owner.of(pid)
    assert owner is not None
    return owner


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one box: ``args`` (argv[0] is the owner marker) and ``popen_kwargs()``
    for ``subprocess.Popen`` or ``asyncio.create_subprocess_exec``. Valid inside its
    ``launch`` block only, which holds the workspace's descriptor."""

    args: tuple[str, ...]
    executable: str
    workspace_fd: int
    uid: int | None

    def popen_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "executable": self.executable,
            "pass_fds": (self.workspace_fd,),
            "env": {},
            "start_new_session": True,
        }
        if self.uid is not None:
            # Done by Popen in the child before exec (no preexec_fn in a threaded process).
            kwargs.update(user=self.uid, group=self.uid, extra_groups=[])
        return kwargs


@contextlib.contextmanager
def launch(
    workspace: Path, command: Sequence[str], *, owner: Owner | None = None
) -> Iterator[Launch]:
    """The box for ``command`` (an argv, run in ``workspace``), owned by ``owner`` (this
    process unless told otherwise)."""
    settings = _config
    uid = settings.uid if os.geteuid() == 0 else None
    if uid is not None:
        _check_reachable(workspace, uid)
    fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        args = (*_bwrap_args(settings, fd, owner or Owner.current()), "--", *_limits(settings))
        yield Launch(args=(*args, *command), executable=settings.bwrap, workspace_fd=fd, uid=uid)
    finally:
        os.close(fd)


def _bwrap_args(settings: SandboxConfig, fd: int, owner: Owner) -> list[str]:
    env = {**_ENV, "HOME": WORKSPACE}
    tmp = str(settings.tmp_bytes)
    return [
        owner.marker,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
        "--clearenv",
        *(arg for name, value in env.items() for arg in ("--setenv", name, value)),
        "--ro-bind",
        "/usr",
        "/usr",
        *_host_links(),
        *(arg for name in _ETC for arg in ("--ro-bind-try", f"/etc/{name}", f"/etc/{name}")),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        # /dev itself is made read-only once /dev/shm has a tmpfs of its own. Both tmpfs
        # are the box's own, empty and gone with it (not the host's shared directories).
        *("--size", tmp, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"),  # noqa: S108
        *("--size", tmp, "--tmpfs", "/tmp"),  # noqa: S108
        *("--bind-fd", str(fd), WORKSPACE, "--chdir", WORKSPACE),
        # Last: the box's own root (bwrap's tmpfs) must not take writes either.
        *("--remount-ro", "/"),
    ]


def _limits(settings: SandboxConfig) -> list[str]:
    # CPU: the soft limit sends SIGXCPU (exit 152, a visible cause); the hard one, a
    # second later, kills a process that ignores it.
    cpu = settings.cpu_seconds
    return [
        _PRLIMIT,
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={settings.memory_bytes}",
        f"--nproc={settings.processes}",
        f"--fsize={settings.file_bytes}",
        "--core=0",
        "--",
    ]


@functools.cache
def _host_links() -> tuple[str, ...]:
    """/bin, /lib… as the host has them: links into /usr when /usr is merged, else
    read-only binds."""
    args: list[str] = []
    for name in _MERGED_USR:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    return tuple(args)


def _check_reachable(path: Path, uid: int) -> None:
    """Raise unless ``uid`` (with the same gid) may search ``path`` and its parents (those
    that exist: what is missing is created later with the usual, searchable modes)."""
    for parent in (path, *path.parents):
        try:
            info = parent.stat()
        except FileNotFoundError:
            continue
        if info.st_uid == uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == uid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            raise SandboxUnavailable(
                f"the sandbox's user (uid {uid}) cannot reach {path}: {parent} is not "
                f"searchable by it (chmod o+x {parent}, or keep the workspaces elsewhere)"
            )


def hand_over(workspace: Path) -> None:
    """Before a box starts in ``workspace``: when this process is root, give the box's user
    the workspace and what other tools (running as root) wrote in it, so the command can
    change those files. Descriptor-relative and never following a link, so a link the box
    planted cannot point this outside the workspace. It walks the whole workspace: call it
    off the event loop."""
    if os.geteuid() != 0:
        return
    uid = _config.uid
    if os.lstat(workspace).st_uid != uid:
        os.chown(workspace, uid, uid)
    for _, dirs, files, dir_fd in os.fwalk(workspace, follow_symlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                if os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_uid != uid:
                    os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)


@functools.cache
def unavailable_reason() -> str | None:
    """Why no box can start on this machine (``None``: they can), found by starting one."""
    settings = _config
    if not os.access(settings.bwrap, os.X_OK):
        return f"bubblewrap (bwrap) is not installed: no {settings.bwrap}"
    if settings.workspace_root is not None and os.geteuid() == 0:
        try:
            _check_reachable(settings.workspace_root, settings.uid)
        except SandboxUnavailable as exc:
            return str(exc)
    with tempfile.TemporaryDirectory(prefix="toolhub-sandbox-probe-") as scratch:
        try:
            hand_over(Path(scratch))
            with launch(Path(scratch), ("true",)) as box:
                probe = subprocess.run(  # noqa: S603 (fixed arguments)
                    box.args, **box.popen_kwargs(), capture_output=True, timeout=30, check=False
                )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the bash sandbox cannot start: {exc}"
    if probe.returncode != 0:
        lines = probe.stderr.decode(errors="replace").strip().splitlines()
        detail = lines[-1] if lines else f"exit code {probe.returncode}"
        return f"the bash sandbox cannot start: {detail}"
    return None


def reap_orphan_sandboxes() -> list[int]:
    """Kill every box whose owner process is gone (a start-up sweep; ``--die-with-parent``
    handles the usual case). Returns the pids killed. Only processes named like bwrap that
    carry the marker are touched; a forged marker can only get its own process killed."""
    # The kernel's process name: the executable's file name, cut at 15 bytes.
    name = Path(_config.bwrap).name[:15]
    reaped = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != name:
                continue
            arg0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode()
        except (OSError, UnicodeDecodeError):
            continue
        owner = Owner.from_marker(arg0)
        if owner is None or owner.alive():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(entry.name), signal.SIGKILL)
            reaped.append(int(entry.name))
    return reaped
