"""``current_time``: the date and time now, in a given time zone."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from toolhub.tools.decorator import function


@function(label="Current time")
def current_time(timezone: str = "UTC") -> str:
    """The current date, time and weekday.

    Args:
        timezone: An IANA time zone such as "Europe/Paris".
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {timezone!r}") from None
    now = datetime.now(UTC).astimezone(zone)
    return f"{now.isoformat(timespec='seconds')} ({now:%A}, {timezone})"
