"""Artifact I/O: JSON with a schema_version, and CSV tables, written atomically (tmp file + rename).

A path ending in `.gz` is gzip-compressed JSON, for writing and reading alike (the simulator's traces,
`*.trace.json.gz`: they are large and only ever opened by a trace viewer, which reads gzip)."""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any


class ArtifactError(ValueError):
    """An input artifact is missing, malformed or of the wrong kind/version."""


def encode_json(obj: Any, indent: int | None = 1) -> bytes:
    """The bytes write_json writes (before any gzip). `indent=None`: one line (`", "` and `": "`
    separators), for large artifacts."""
    return (json.dumps(obj, indent=indent, default=_default) + "\n").encode()


def gzip_bytes(data: bytes) -> bytes:
    """gzip with no name and mtime 0 in the header: the same data always gives the same bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", filename="", mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def _write_atomically(path: str | os.PathLike, write, mode: str = "wb", **open_kw) -> None:
    """write(file) into a temporary file beside `path`, then rename it over `path`: a reader never sees a
    half-written file, and an interrupted write leaves the old one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **open_kw) as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> None:
    """Write `obj` as JSON (encode_json) to `path` atomically; gzip-compressed when `path` ends in `.gz`."""
    data = encode_json(obj, indent)
    if str(path).endswith(".gz"):
        data = gzip_bytes(data)
    _write_atomically(path, lambda f: f.write(data))


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically (a report a tool prints and keeps)."""
    _write_atomically(path, lambda f: f.write(text), "w")


def write_csv(path: str | os.PathLike, rows: list[dict], fieldnames: list[str] | None = None,
              extrasaction: str = "raise") -> None:
    """Write `rows` as a CSV table with a header to `path` atomically; the columns are `fieldnames`, else
    the first row's keys."""
    def write(f):
        w = csv.DictWriter(f, fieldnames=fieldnames or list(rows[0]), extrasaction=extrasaction)
        w.writeheader()
        w.writerows(rows)
    _write_atomically(path, write, "w", newline="")


def _default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_json(path: str | os.PathLike, kind: str | None = None, schema_version: int | None = None) -> dict:
    """Read an artifact; check its `artifact` kind and `schema_version` when given."""
    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: file not found")
    try:
        obj = json.loads(_read_text(path))
    except (json.JSONDecodeError, gzip.BadGzipFile, EOFError) as e:
        raise ArtifactError(f"{path}: not valid JSON ({e})") from e
    if kind is not None and obj.get("artifact") != kind:
        raise ArtifactError(
            f"{path}: expected a {kind} artifact but found {obj.get('artifact')!r}; "
            f"produce it with `harmony {kind.split('.')[0]}`")
    if schema_version is not None and obj.get("schema_version") != schema_version:
        raise ArtifactError(
            f"{path}: schema_version {obj.get('schema_version')} but this harmony reads {schema_version}; "
            f"regenerate the file with this version")
    return obj


def _read_text(path: Path) -> str:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    return path.read_text()


class JsonlWriter:
    """Append-only JSONL, flushed per record, that appears under its name only when closed.

    Records go to `<name>.partial` as they are written (a crash keeps them there, for `partial_path` to
    find); `close()` renames it to `<name>`. A killed run so never leaves a file that looks finished: the
    job lists skip a job whose output exists, and an empty or cut-off record would hide the run."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.partial = partial_path(self.path)
        self._f = open(self.partial, "w")

    def write(self, record: dict) -> None:
        self._f.write(json.dumps(record, default=_default) + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()
            os.replace(self.partial, self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# Exit status of a command that stopped, by design, before it could write its record (a baseline search
# whose next candidate would outlast $HARMONY_DEADLINE): the workflow's guard records nothing, and the job
# lists count the job as left for the next call, not as failed.
DEFERRED_EXIT = 75     # EX_TEMPFAIL


class Deferred(Exception):
    """Work that would outlast $HARMONY_DEADLINE (the device call's end, in seconds since the epoch, set by
    experiments/device/grid_gpu.sh) was not started or not finished: the command exits DEFERRED_EXIT
    without a record, and the next call runs it (a baseline search goes on from its candidates on record)."""


def _env_seconds(name: str, meaning: str) -> float | None:
    """A number of seconds from environment variable `name`, or None when it is not set."""
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: give {meaning}") from None


def deadline() -> float | None:
    """$HARMONY_DEADLINE as seconds since the epoch, or None when it is not set."""
    return _env_seconds("HARMONY_DEADLINE", "the deadline in seconds since the epoch")


def seconds_left() -> float | None:
    """Seconds until $HARMONY_DEADLINE (negative once past it), or None when it is not set."""
    end = deadline()
    return None if end is None else end - time.time()


def call_window_s() -> float | None:
    """$HARMONY_CALL_S: the seconds from a device call's job list start to $HARMONY_DEADLINE (set by
    experiments/device/grid_gpu.sh), the most time any job of that call can have; None when not set."""
    return _env_seconds("HARMONY_CALL_S", "the call's window in seconds")


# A run that began within this many seconds of its call's start had all the time a call gives: leaving it
# for the next call gains nothing (baselines: status over-time instead of Deferred)
FRESH_CALL_SLACK_S = 60.0


def had_whole_call(began: float) -> str | None:
    """Why no later device call gives work that began at `began` (time.time()) more time, when none does:
    it began within FRESH_CALL_SLACK_S of its call's start ($HARMONY_CALL_S before $HARMONY_DEADLINE).
    None otherwise, or without the two variables (outside a device call's job list)."""
    window, end = call_window_s(), deadline()
    if window is None or end is None:
        return None
    into = window - (end - began)
    if into > FRESH_CALL_SLACK_S:
        return None
    return (f"it began {max(into, 0):.0f} s into its call's {window:.0f} s and ran {time.time() - began:.0f} s, "
            f"so no call of that length gives it the time")


DEADLINE_MARGIN = 1.1    # an estimate is charged 10% over: iteration times vary between iterations and hosts


def outlasts_deadline(seconds: float, left: float | None) -> bool:
    """Whether work estimated at `seconds` (charged DEADLINE_MARGIN over) would end after the deadline that
    is `left` seconds away (never without one). The one rule of every run's deadline check."""
    return left is not None and DEADLINE_MARGIN * seconds > left


def partial_path(path: str | os.PathLike) -> Path:
    """Where a JsonlWriter for `path` keeps its records until it is closed."""
    path = Path(path)
    return path.with_name(path.name + ".partial")


def candidate_path(out: Path, ubatch: int | str) -> Path:
    """Where a microbatch search writing `out` records its candidate u (`<stem>.u<U>.jsonl` beside it)."""
    return out.with_name(f"{out.stem}.u{ubatch}{out.suffix or '.jsonl'}")


def candidate_paths(out: Path) -> list[Path]:
    """The candidate records (candidate_path) of the search that wrote `out`."""
    return sorted(out.parent.glob(candidate_path(out, "*").name))


def undo_interrupted(out: str | os.PathLike) -> None:
    """A run that the call's end interrupted (SIGTERM) writes its record with status `interrupted`. That is
    not a result: its iteration lines go back to the record's .partial and the record is removed, so the
    caller decides as for a run that wrote nothing (the workflow's guard, a baseline search's candidate:
    over-time, or no record and the next call runs it)."""
    out = Path(out)
    if out.suffix != ".jsonl" or not out.exists():
        return
    lines = out.read_text().splitlines()
    try:
        last = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return
    if last.get("record") == "summary" and last.get("status") == "interrupted":
        tmp = partial_path(out).with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in lines[:-1]))
        os.replace(tmp, partial_path(out))
        out.unlink()


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out
