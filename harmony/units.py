"""Parsing and printing of byte sizes (`11GiB`, `9e9`, `10GB`)."""
from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}


def parse_bytes(text: str | int | float | None) -> int | None:
    """'11GiB' -> 11811160064; '9e9' -> 9000000000; None/'none'/'' -> None (no cap)."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return int(text)
    s = str(text).strip().lower().replace("_", "")
    if s in ("", "none", "0", "off", "inf"):
        return None
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)", s)
    if not m or m.group(2) not in _UNITS:
        raise ValueError(
            f"cannot read the size {text!r}: write a number with an optional unit, "
            f"e.g. 11GiB, 10GB, 512MiB or 9e9 (bytes)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def format_bytes(n: float | int | None) -> str:
    if n is None:
        return "none"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"
