"""What a query means in words a tool's description uses: product names, shell commands,
jargon and the shapes of things (a ticket key, a channel, a file, a sum).

People ask for tools in their own words: "DM Priya on slack", "ls the src folder", "bump
PROJ-221". Tool descriptions say "direct message", "chat", "list directory", "ticket".
Neither ranker bridges that alone: BM25 needs the word, and a small sentence model knows
little of brand names. ``expansion`` returns the generic words a query implies; tool_search
adds them to the query for both rankers (``toolhub.tools.search``), so the words people
type still count in full and the implied ones only add evidence.

Invariants:

- The glossary is general knowledge about software tools and the services they front,
  written once for every catalog: it names no tool of any catalog and is never fitted to
  one. A term maps only to words that mean what the term means (``slack`` is chat, not
  a particular tool).
- Expansion is deterministic and linear in the query: the shape patterns are RE2
  (google-re2, no backtracking), phrases are looked up by exact n-grams, and only the
  first ``MAX_QUERY_CHARS`` of a query are read.
- It never removes or rewrites a word of the query; an unknown word expands to nothing.

docs/tool-search.md says how the glossary was built and measured.
"""

from __future__ import annotations

import functools
import re

import re2

MAX_QUERY_CHARS = 1_000
_LONGEST_PHRASE = 3
_WORDS = re.compile(r"[a-z0-9][a-z0-9_+.-]*[a-z0-9+]|[a-z0-9]")

# The shapes of things a request names. RE2 has no look-behind: a leading ``(?:^|\W)``
# stands in for "not inside a word".
_SHAPES: tuple[tuple[str, str], ...] = (
    (r"\b[A-Z][A-Z0-9]+-\d+\b", "ticket"),
    (r"(?:^|[^\w#])#[A-Za-z][\w-]*", "channel"),
    (r"(?:^|[^\w#])#\d+\b", "number"),
    (r"(?:^|[^\w@.])@[A-Za-z][\w.-]*", "user"),
    (r"\bhttps?://\S+|\bwww\.\S+", "url web page"),
    (r"\b[\w.+-]+@[\w-]+\.[A-Za-z]{2,}\b", "email address"),
    (
        r"(?i)\b[\w-]+\.(?:txt|md|rst|py|js|ts|tsx|jsx|go|rs|java|rb|php|c|h|cpp|json|ya?ml"
        r"|toml|ini|cfg|conf|env|csv|tsv|log|pdf|docx?|xlsx?|pptx?|png|jpe?g|gif|svg|webp"
        r"|mp3|wav|m4a|mp4|mov|zip|tar|gz|tgz|html?|css|sh|sql|lock)\b",
        "file",
    ),
    (r"(?:^|\s)(?:\.{1,2}/|~/|/)[\w.-]+|(?:^|\s)[\w.-]+/[\w.-]+/[\w./-]*", "path"),
    (r"\bv?\d+\.\d+\.\d+\b|\bv\d+(?:\.\d+)?\b", "version"),
    (r"\d\s*%|\d\s*[+*/^=]\s*\(?-?\d|\d\s+-\s+\d|\d\s*x\s*[+*/^=-]", "calculate"),
    (
        r"(?i)[$€£¥]\s*\d|\b\d[\d,.]*\s*(?:usd|eur|gbp|jpy|chf|cad|aud|inr|dollars?|euros?"
        r"|pounds?|yen)\b",
        "currency amount",
    ),
    (r"(?i)\b\d{1,2}(?::\d\d)?\s*(?:am|pm)\b", "time"),
)

# Word or phrase (lowercase, as typed) -> generic words a tool description would use.
GLOSSARY: dict[str, str] = {
    # Source hosting and CI.
    "github": "repository",
    "gitlab": "repository",
    "bitbucket": "repository",
    "gitea": "repository",
    "repo": "repository",
    "repos": "repositories",
    "pr": "pull request",
    "prs": "pull requests",
    "mr": "merge request pull request",
    "merge request": "pull request",
    "commit": "repository change",
    "commits": "repository changes",
    "branch": "repository",
    "fork": "repository copy",
    "clone": "repository copy",
    "codebase": "code files",
    "monorepo": "repository",
    "gist": "code snippet",
    "ci": "pipeline build",
    "jenkins": "pipeline build",
    "github actions": "pipeline workflow",
    "circleci": "pipeline build",
    "travis": "pipeline build",
    "buildkite": "pipeline build",
    "workflow": "pipeline",
    "runner": "pipeline job",
    "build": "pipeline",
    "artifact": "build output file",
    "artifacts": "build output files",
    # Chat and mail.
    "slack": "chat channel message",
    "ms teams": "chat channel message",
    "discord": "chat channel message",
    "mattermost": "chat channel message",
    "telegram": "chat message",
    "whatsapp": "chat message",
    "irc": "chat channel",
    "dm": "direct message",
    "dms": "direct messages",
    "thread": "conversation messages",
    "emoji": "reaction",
    "thumbs-up": "reaction",
    "thumbs up": "reaction",
    "react": "reaction",
    "gmail": "email",
    "outlook": "email",
    "inbox": "email mailbox",
    "mail": "email",
    "mails": "emails",
    "e-mail": "email",
    "cc": "email",
    "bcc": "email",
    "reply all": "reply email",
    "newsletter": "email",
    "sms": "text message",
    # Calendar and time.
    "gcal": "calendar",
    "google calendar": "calendar event",
    "ical": "calendar",
    "meeting": "calendar event",
    "appointment": "calendar event",
    "standup": "meeting calendar event",
    "invite": "calendar invitation",
    "rsvp": "respond invitation",
    "ooo": "out of office",
    "pto": "out of office",
    "vacation": "out of office",
    "timezone": "time zone",
    "tz": "time zone",
    "utc": "time zone",
    "cron": "schedule",
    # Files and the shell.
    "ls": "list directory",
    "dir": "directory",
    "cat": "read file",
    "mv": "move rename",
    "cp": "copy",
    "rm": "delete",
    "rmdir": "delete directory",
    "mkdir": "create directory",
    "grep": "search text files",
    "rg": "search text files",
    "ripgrep": "search text files",
    "touch": "create file",
    "folder": "directory",
    "folders": "directories",
    "chmod": "permissions",
    "du": "file size",
    "stat": "file info",
    "sed": "replace text file",
    "diff": "changes",
    "tar": "archive",
    "unzip": "extract archive",
    # Storage and data.
    "s3": "bucket object storage",
    "gcs": "bucket object storage",
    "minio": "bucket object storage",
    "r2": "bucket object storage",
    "blob": "object storage",
    "blobs": "objects storage",
    "postgres": "sql database",
    "postgresql": "sql database",
    "mysql": "sql database",
    "mariadb": "sql database",
    "sqlite": "sql database",
    "psql": "sql database",
    "pg_dump": "database backup",
    "mysqldump": "database backup",
    "mongo": "database",
    "mongodb": "database",
    "redis": "key value cache",
    "memcached": "key value cache",
    "valkey": "key value cache",
    "cache": "key value",
    "ttl": "expiry",
    "bigquery": "sql query",
    "snowflake": "sql query",
    "elasticsearch": "search index",
    # Infrastructure.
    "k8s": "kubernetes",
    "kubectl": "kubernetes",
    "kube": "kubernetes",
    "helm": "kubernetes",
    "ec2": "virtual machine instance",
    "vm": "virtual machine instance",
    "vms": "virtual machine instances",
    "droplet": "virtual machine instance",
    "gce": "virtual machine instance",
    "aws": "cloud",
    "gcp": "cloud",
    "azure": "cloud",
    "ssh": "server instance",
    "docker": "container image",
    "container": "pod",
    "replicas": "scale",
    "route53": "dns",
    "cloudflare": "dns",
    "nameserver": "dns",
    "a record": "dns record",
    "cname": "dns record",
    "mx record": "dns record",
    "txt record": "dns record",
    "ssl": "certificate",
    "tls": "certificate",
    # Business.
    "stripe": "billing payment",
    "paypal": "payment",
    "invoice": "billing",
    "invoices": "billing",
    "refund": "payment",
    "subscription": "billing plan",
    "discount": "coupon",
    "salesforce": "crm",
    "hubspot": "crm",
    "pipedrive": "crm",
    "zoho": "crm",
    "lead": "crm contact",
    "leads": "crm contacts",
    "deal": "crm",
    "prospect": "crm contact",
    "confluence": "wiki page",
    "notion": "wiki page",
    "sharepoint": "wiki page",
    "google sheet": "spreadsheet",
    "google sheets": "spreadsheet",
    "gsheet": "spreadsheet",
    "excel": "spreadsheet",
    "airtable": "spreadsheet",
    "workbook": "spreadsheet",
    "csv": "spreadsheet rows",
    "jira": "ticket tracker",
    "asana": "task tracker",
    "trello": "board tracker",
    "clickup": "task tracker",
    "youtrack": "ticket tracker",
    "sprint": "tracker board",
    "backlog": "tracker tickets",
    "kanban": "board",
    "todo": "task",
    # Web and media.
    "google": "web search",
    "bing": "web search",
    "duckduckgo": "web search",
    "webhook": "http request",
    "curl": "http request",
    "wget": "download url",
    "puppeteer": "browser",
    "playwright": "browser",
    "selenium": "browser",
    "chrome": "browser",
    "wayback machine": "web archive",
    "scrape": "fetch page",
    "website": "web page",
    "deepl": "translate",
    "whisper": "transcribe audio",
    "tts": "text to speech",
    "mp3": "audio",
    "podcast": "audio recording",
    "voice memo": "audio recording",
    "photo": "image",
    "photos": "images",
    "picture": "image",
    "pic": "image",
    "png": "image",
    "jpg": "image",
    "ocr": "text from image",
    "gps": "coordinates location",
    "lat long": "latitude longitude",
    # Operations.
    "grafana": "dashboard metrics",
    "datadog": "metrics monitoring",
    "prometheus": "metrics",
    "new relic": "metrics monitoring",
    "sentry": "errors",
    "pagerduty": "incident oncall page",
    "opsgenie": "incident oncall page",
    "pager": "oncall page",
    "on-call": "oncall",
    "on call": "oncall",
    "outage": "incident",
    "sev1": "incident",
    "postmortem": "incident report",
    "launchdarkly": "feature flag",
    "unleash": "feature flag",
    "flag": "feature flag",
    "rollout": "release",
    "canary": "rollout",
    "npm": "package",
    "pypi": "package",
    "pip": "package",
    "crates": "package",
    "maven": "package",
    "cve": "vulnerability",
    "dependency": "package",
    "dependencies": "packages",
    "deps": "package dependencies",
    "library": "package",
    "changelog": "release notes",
    # Everyday.
    "remind": "reminder",
    "remember": "memory save",
    "forget": "memory delete",
    "sum": "calculate",
    "percent": "calculate",
}


@functools.cache
def _shapes() -> tuple[tuple[re2._Regexp, str], ...]:
    return tuple((re2.compile(pattern), words) for pattern, words in _SHAPES)


def expansion(query: str) -> str:
    """The words ``query`` implies that it may not say, space-separated (empty for none):
    each shape found, then each glossary phrase, longest first, in the query's order."""
    text = query[:MAX_QUERY_CHARS]
    implied = [words for pattern, words in _shapes() if pattern.search(text)]
    words = _WORDS.findall(text.lower())
    covered: set[int] = set()
    for size in range(_LONGEST_PHRASE, 0, -1):
        for start in range(len(words) - size + 1):
            span = range(start, start + size)
            phrase = " ".join(words[start : start + size])
            if phrase in GLOSSARY and covered.isdisjoint(span):
                covered.update(span)
                implied.append(GLOSSARY[phrase])
    return " ".join(dict.fromkeys(implied))
