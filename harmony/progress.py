"""A tiny progress bar on stderr, without dependencies, for long sweeps of any stage.

    with Progress(total=40, desc="profile") as bar:
        for ...:
            bar.update(note="block u=8")

On a terminal it redraws one line; in a log (not a tty) it prints a line at most every `log_every_s`
seconds and at the end, so logs stay short. `enabled=False` silences it.
"""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, desc: str = "", stream=None, enabled: bool = True, width: int = 28,
                 log_every_s: float = 10.0):
        self.total = max(int(total), 0)
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.width = width
        self.n = 0
        self.note = ""
        self.t0 = time.perf_counter()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0
        self.log_every_s = log_every_s

    def set_total(self, total: int) -> None:
        self.total = max(int(total), self.n)
        self._draw()

    def update(self, n: int = 1, note: str | None = None) -> None:
        self.n += n
        if note is not None:
            self.note = note
        self._draw()

    def set_note(self, note: str) -> None:
        self.note = note
        self._draw()

    def line(self) -> str:
        el = time.perf_counter() - self.t0
        if self.total:
            frac = min(self.n / self.total, 1.0)
            fill = int(round(frac * self.width))
            bar = "#" * fill + "-" * (self.width - fill)
            eta = (el / frac - el) if 0 < frac < 1 else 0.0
            tail = f" eta {eta:5.0f}s" if 0 < frac < 1 else ""
            return f"{self.desc} [{bar}] {self.n}/{self.total} {el:5.1f}s{tail} {self.note}"
        return f"{self.desc} {self.n} {el:5.1f}s {self.note}"

    def _draw(self, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._tty:
            if final or now - self._last > 0.05:
                self.stream.write("\r\033[K" + self.line()[:200])
                if final:
                    self.stream.write("\n")
                self.stream.flush()
                self._last = now
        elif final or now - self._last >= self.log_every_s:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self._last = now

    def close(self) -> None:
        self._draw(final=True)
        self.enabled = False

    def __enter__(self):
        self._last = time.perf_counter() if not self._tty else 0.0
        return self

    def __exit__(self, *exc):
        self.close()
