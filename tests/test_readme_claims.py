"""README's table of where the claims stand ("What it measures today") quotes the committed `harmony check`
results, `results/paper/<hardware>/checks.csv`, which `experiments/device/after_calls.sh` rewrites after
every device call. The table itself is written by hand, so this test keeps its numbers equal to the
CSVs': a session that files new results and forgets the README fails here, naming the cell."""
from __future__ import annotations

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the README's column names -> results folders
FOLDERS = {"1× H100": "1xH100-80GB-HBM3", "2× H200": "2xH200", "2× H100": "2xH100-80GB-HBM3", "4× H200": "4xH200"}
NUM = r"(\d+(?:\.\d+)?)"


def claims_table() -> tuple[list[str], dict[str, list[str]]]:
    """(the columns' results folders, {claim id: its cells}) of the README's claims table."""
    text = (ROOT / "README.md").read_text()
    start = text.index("Where the targets of figure 10 stand")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    header, body = rows[0], rows[2:]
    folders = []
    for col in header[1:]:
        hw = next((f for name, f in FOLDERS.items() if col.startswith(name)), None)
        assert hw, f"README claims table: column {col!r} names no results folder this test knows; add it to FOLDERS"
        folders.append(hw)
    return folders, {r[0].split()[0]: r[1:] for r in body}


def check_rows(folder: str) -> dict[str, dict]:
    with open(ROOT / "results" / "paper" / folder / "checks.csv", newline="") as f:
        return {r["claim"]: r for r in csv.DictReader(f)}


def pairs(pattern: str, text: str, what: str) -> tuple[str, ...]:
    m = re.search(pattern, text)
    assert m, f"{what}: no match for {pattern!r} in {text!r}"
    return m.groups()


# claim -> (pattern in the README's cell, pattern in checks.csv's detail, how the groups compare)
QUOTES = {
    "C3": (rf"min {NUM}×, geomean {NUM}×", rf"min {NUM}x .*geometric mean {NUM}x", "equal"),
    "C4": (rf"{NUM}%, {NUM}%", rf"median {NUM}%, worst {NUM}%", "equal"),
    "C10": (r"(\d+) of (\d+)", r"\((\d+) of (\d+) below[^,)]*(?:, (\d+) of the others awaiting)?", "passing"),
    "C11": (r"(\d+) of (\d+) runs", r"(\d+) of (\d+) runs within", "equal"),
    "C12": (r"(\d+) of (\d+) runs", r"(\d+) of (\d+) runs at", "equal"),
}


def test_readme_claims_table_quotes_the_committed_checks():
    folders, table = claims_table()
    assert set(QUOTES) | {"C8"} <= set(table), f"README claims table lacks rows: {sorted(set(QUOTES) - set(table))}"
    for col, folder in enumerate(folders):
        checks = check_rows(folder)
        for claim, (cell_re, detail_re, how) in QUOTES.items():
            cell, detail = table[claim][col], checks[claim]["detail"]
            where = f"README claims table, {claim} for {folder}"
            said = pairs(cell_re, cell, where)
            measured = pairs(detail_re, detail, f"{folder}/checks.csv {claim}")
            if how == "passing":      # the README counts the configurations that pass, the check those below
                # and those at the target only because a baseline has no record yet
                measured = (str(int(measured[1]) - int(measured[0]) - int(measured[2] or 0)), measured[1])
            assert said == measured, f"{where}: says {said}, checks.csv has {measured} ({detail[:120]})"
        # C8: 'pass', or the number of grid points still to run
        cell, row = table["C8"][col], checks["C8"]
        if cell.startswith("pass"):
            assert row["verdict"] == "pass", f"README claims table, C8 for {folder}: says pass, checks.csv {row['detail']}"
        else:
            said = pairs(r"(\d+) points? to run", cell, f"README claims table, C8 for {folder}")[0]
            assert said == row["measured"], f"README claims table, C8 for {folder}: says {said} to run, checks.csv {row['measured']}"


def test_a_stale_quote_is_caught():
    """The comparison itself can fail: one digit off is a mismatch."""
    cell_re, detail_re, _ = QUOTES["C3"]
    said = pairs(cell_re, "min 1.02×, geomean 1.39×", "cell")
    assert said != pairs(detail_re, "min 1.02x at gpt2-xl D=16, geometric mean 1.40x over 10 configs", "detail")
    assert said == pairs(detail_re, "min 1.02x at gpt2-xl D=16, geometric mean 1.39x over 10 configs", "detail")
