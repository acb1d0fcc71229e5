"""The bash sandbox against an attacker who got a command approved: each test tries one
way out and checks what a person would see (the secret is not in the output, the host
file is not there, the service was not reached, the command was stopped and said why).

Everything runs for real: bubblewrap, the host's PostgreSQL and Redis, a listener of the
test's own on loopback. A command outliving a SIGKILLed worker is tested with a real
Celery worker in tests/integration/agent_app/test_worker_tools.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import namespace_survivors
from toolhub.tools import ToolContext, agent_tools, availability, get, sandbox

pytestmark = [pytest.mark.usefixtures("bubblewrap"), pytest.mark.processes]

CHECKOUT = Path(sandbox.__file__).resolve().parents[2]
MIB = 1 << 20


@pytest.fixture
def workspace(reachable_tmp: Path) -> Path:
    root = reachable_tmp / "session-1"
    root.mkdir()
    return root


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(user_id="u1", session_id="s1", workspace=workspace, env={})


@pytest.fixture
def box_config():
    """Change the sandbox's configuration for one test (``box_config(file_bytes=…)``)."""
    before = sandbox.config()
    yield lambda **changes: sandbox.configure(replace(before, **changes))
    sandbox.configure(before)


async def _run(ctx: ToolContext, command: str, timeout: int = 30):
    return await get("bash").execute({"command": command, "timeout": timeout}, ctx)


async def _run_in_box(ctx: ToolContext, command: str, timeout: int = 30):
    """Run ``command`` after printing the box's pid namespace; returns the result, the
    namespace and everything streamed (which a timeout does not lose)."""
    chunks: list[str] = []
    streaming = replace(ctx, on_update=lambda update: chunks.append(update.chunk))
    result = await _run(streaming, f"readlink /proc/self/ns/pid; {command}", timeout)
    streamed = "".join(chunks)
    return result, streamed.split("\n", 1)[0], streamed


# --- files --------------------------------------------------------------------------------


async def test_the_command_cannot_read_another_sessions_workspace(ctx, reachable_tmp):
    other = reachable_tmp / "session-2"
    other.mkdir()
    (other / "secret.txt").write_text("other-session-secret")

    result = await _run(
        ctx,
        f"cat {other}/secret.txt ../session-2/secret.txt; ls -a / ..; "
        "grep -rs other-session-secret / --exclude-dir=proc --exclude-dir=usr",
    )

    assert "other-session-secret" not in result.content
    assert "No such file or directory" in result.content


async def test_the_command_cannot_read_etc_shadow(ctx):
    result = await _run(ctx, "cat /etc/shadow /etc/gshadow; ls -m /etc")

    assert "root:" not in result.content
    assert "/etc/shadow: No such file or directory" in result.content
    assert "\nalternatives, ld.so.cache, localtime\n" in result.content


async def test_the_command_cannot_read_the_checkout(ctx):
    settings_file = CHECKOUT / "toolhub" / "settings.py"
    assert "SECRET_KEY" in settings_file.read_text()

    result = await _run(ctx, f"cat {settings_file}; ls {CHECKOUT}")

    assert "SECRET_KEY" not in result.content
    assert f"{settings_file}: No such file or directory" in result.content


async def test_a_write_outside_the_workspace_never_reaches_the_host(ctx):
    name = f"toolhub-escape-{uuid.uuid4().hex}"
    host_targets = [Path("/tmp") / name, CHECKOUT / name, Path("/usr") / name]  # noqa: S108

    result = await _run(
        ctx, "; ".join(f"echo pwned > {target}" for target in host_targets) + "; touch /x"
    )

    assert not any(target.exists() for target in host_targets)
    # /tmp is the box's own; the rest of the box is read-only or not there at all.
    assert f"{CHECKOUT}/{name}: No such file or directory" in result.content
    assert f"/usr/{name}: Read-only file system" in result.content
    assert "'/x': Read-only file system" in result.content


async def test_the_command_runs_unprivileged_with_no_capabilities(ctx):
    result = await _run(ctx, "id -u; grep CapEff /proc/self/status; unshare -U true")

    uid, capabilities = result.content.splitlines()[:2]
    assert int(uid) != 0
    assert int(uid) == (sandbox.config().uid if os.geteuid() == 0 else os.getuid())
    assert capabilities.split() == ["CapEff:", "0000000000000000"]
    assert "unshare failed" in result.content


# --- network ------------------------------------------------------------------------------


def _connect_attempts(host: str, port: int) -> str:
    """Connect with bash's /dev/tcp and, where the box has it, with Python."""
    return (
        f"(echo PING > /dev/tcp/{host}/{port}) && echo REACHED-BY-BASH; "
        "command -v python3 >/dev/null && python3 -c "
        f'\'import socket; socket.create_connection(("{host}", {port}), 2); '
        'print("REACHED-BY-PYTHON")\''
    )


def _reachable_from_the_host(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    socket.create_connection((parts.hostname, parts.port), 2).close()
    return parts.hostname, parts.port


async def test_the_command_cannot_reach_redis(ctx, redis_url):
    host, port = _reachable_from_the_host(redis_url)

    result = await _run(ctx, f"{_connect_attempts(host, port)}; redis-cli -h {host} -p {port} ping")

    assert "REACHED" not in result.content
    assert "PONG" not in result.content
    assert "Could not connect to Redis" in result.content


async def test_the_command_cannot_reach_postgresql_by_tcp_or_its_socket(ctx, postgres_url):
    host, port = _reachable_from_the_host(postgres_url)

    result = await _run(
        ctx,
        f"{_connect_attempts(host, port)}; "
        f"psql -h {host} -p {port} -U postgres -Atc 'select 40 + 2'; "
        "psql -U postgres -Atc 'select 40 + 2'; ls /var/run/postgresql",
    )

    assert "REACHED" not in result.content
    assert "42" not in result.content.splitlines()
    assert "/var/run/postgresql': No such file or directory" in result.content


async def test_the_command_cannot_reach_a_server_listening_on_the_hosts_loopback(ctx):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        result = await _run(ctx, _connect_attempts("127.0.0.1", port))

        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert "REACHED" not in result.content
    assert "Connection refused" in result.content


async def test_the_command_has_no_route_to_the_internet(ctx):
    # Read from the box's own kernel tables: no address outside this machine is ever tried.
    result = await _run(ctx, "tail -n +3 /proc/net/dev | cut -d: -f1; tail -n +2 /proc/net/route")

    assert result.content.split() == ["lo", "[exit", "code", "0]"]


# --- limits -------------------------------------------------------------------------------


async def test_a_fork_bomb_ends_with_an_error_and_leaves_no_process_behind(ctx):
    result, namespace, streamed = await _run_in_box(
        ctx, "bomb() { bomb | bomb & }; bomb; sleep 60", timeout=5
    )

    assert "fork: retry: Resource temporarily unavailable" in streamed
    assert result.is_error
    assert "timed out after 5 s" in result.content
    assert await namespace_survivors(namespace) == []


async def test_a_two_gigabyte_allocation_fails(ctx):
    result = await _run(
        ctx,
        "dd if=/dev/zero of=/dev/null bs=2G count=1; "
        "command -v python3 >/dev/null && python3 -c 'bytearray(2 * 1024**3)'",
    )

    assert "dd: memory exhausted" in result.content
    assert "MemoryError" in result.content
    assert result.is_error


async def test_endless_output_is_cut_at_the_cap_and_the_command_stopped(ctx):
    result, namespace, _ = await _run_in_box(ctx, "yes")

    assert result.is_error
    assert result.content.endswith(
        f"[stopped: more than {sandbox.config().output_bytes // MIB} MiB of output]"
    )
    assert await namespace_survivors(namespace) == []


async def test_a_huge_file_is_stopped_at_the_file_size_limit(ctx, workspace, box_config):
    box_config(file_bytes=8 * MIB)

    result = await _run(ctx, "head -c 64M /dev/zero > huge")

    assert result.is_error
    assert result.content.endswith("[exit code 153: stopped at the file size limit]")
    assert (workspace / "huge").stat().st_size == 8 * MIB


async def test_a_cpu_hog_is_stopped_at_the_cpu_time_limit(ctx, box_config):
    box_config(cpu_seconds=1)

    result = await _run(ctx, "while :; do :; done")

    assert result.is_error
    assert result.content.endswith("[exit code 152: stopped at the CPU time limit]")


# --- ownership and availability -------------------------------------------------------------


def test_a_box_whose_owner_is_gone_is_killed_by_the_start_up_reaper(workspace):
    # The owner dies without --die-with-parent firing: the box's parent is this process,
    # alive, while its marker names another that is gone (a pid since reused, or a crash
    # between the fork and bwrap's own prctl).
    doomed = subprocess.Popen(["sleep", "60"])
    dead_owner = sandbox.Owner.of(doomed.pid)
    doomed.kill()
    doomed.wait()
    with sandbox.launch(workspace, ("sleep", "60"), owner=dead_owner) as box:
        orphan = subprocess.Popen(box.args, **box.popen_kwargs())
    with sandbox.launch(workspace, ("sleep", "60")) as box:
        owned = subprocess.Popen(box.args, **box.popen_kwargs())
    try:
        reaped = sandbox.reap_orphan_sandboxes()

        # Every server that starts runs this sweep over the whole machine, and other tests
        # start servers alongside this one (make test runs two workers): the orphan is
        # killed by this sweep or by one of theirs, never left running.
        assert orphan.pid in reaped or orphan.poll() is not None
        assert owned.pid not in reaped
        assert orphan.wait(timeout=10) == -9
        assert owned.poll() is None
    finally:
        for process in (orphan, owned):
            process.kill()
            process.wait()


async def test_without_bubblewrap_bash_is_unavailable_with_the_reason_and_runs_nothing(
    ctx, workspace, box_config
):
    box_config(bwrap="/nonexistent/bwrap")
    reason = "bubblewrap (bwrap) is not installed: no /nonexistent/bwrap"

    hidden = agent_tools(ctx=ctx, names=["bash"]).reason_for("bash")
    result = await _run(ctx, "touch ran")

    assert availability(get("bash"), ctx) == reason
    assert (hidden.layer, hidden.reason) == ("L4", reason)
    assert result.is_error
    assert not (workspace / "ran").exists()


def test_a_sandbox_that_fails_to_start_makes_bash_unavailable_with_bwraps_error(
    ctx, reachable_tmp, box_config
):
    refusing = reachable_tmp / "bwrap"
    refusing.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    refusing.chmod(0o755)
    box_config(bwrap=str(refusing))

    assert availability(get("bash"), ctx) == (
        "the bash sandbox cannot start: bwrap: No permissions to create new namespace"
    )


def test_a_workspace_root_the_box_cannot_reach_makes_bash_unavailable(
    ctx, reachable_tmp, box_config
):
    if os.geteuid() != 0:
        pytest.skip("only a root process hands its workspaces to another user")
    private = reachable_tmp / "private"
    private.mkdir(mode=0o700)
    box_config(workspace_root=private / "workspaces")

    assert availability(get("bash"), ctx) == (
        f"the sandbox's user (uid {sandbox.config().uid}) cannot reach "
        f"{private}/workspaces: {private} is not searchable by it "
        f"(chmod o+x {private}, or keep the workspaces elsewhere)"
    )
