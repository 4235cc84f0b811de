"""harmony.provenance: a record's code found by git's tree hash of the files, not by the .git beside them."""
import json
import os
import shutil
import subprocess
from argparse import Namespace

import pytest

from harmony import provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")


def git(repo, *args) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A checkout with the two code folders: nested folders, names that sort differently as folders
    ('a' against 'a.py', 'a-b'), an executable, a binary file."""
    git(tmp_path, "init", "-q")
    code = tmp_path / "harmony"
    (code / "a").mkdir(parents=True)
    (code / "a" / "x.py").write_text("x = 1\n")
    (code / "a.py").write_text("a = 1\n")
    (code / "a-b.py").write_text("ab = 1\n")
    (code / "run.sh").write_text("#!/bin/sh\n")
    (code / "run.sh").chmod(0o755)
    (code / "blob.bin").write_bytes(bytes(range(256)))
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "b.py").write_text("b = 1\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_tree_hash_is_gits_own_for_the_same_files(repo):
    assert provenance.tree_hash(repo / "harmony") == git(repo, "rev-parse", "HEAD:harmony")
    assert provenance.tree_hash(repo / "harmony" / "a") == git(repo, "rev-parse", "HEAD:harmony/a")
    assert provenance.source_trees(repo) == {"harmony": git(repo, "rev-parse", "HEAD:harmony"),
                                             "baselines": git(repo, "rev-parse", "HEAD:baselines")}


def test_what_git_ignores_is_left_out_and_a_change_is_seen(repo):
    before = provenance.tree_hash(repo / "harmony")
    (repo / "harmony" / "__pycache__").mkdir()
    (repo / "harmony" / "__pycache__" / "a.cpython-312.pyc").write_bytes(b"\0")
    (repo / "harmony" / "empty").mkdir()                 # git keeps no empty folder
    assert provenance.tree_hash(repo / "harmony") == before
    (repo / "harmony" / "a.py").write_text("a = 2\n")
    assert provenance.tree_hash(repo / "harmony") != before
    (repo / "harmony" / "a.py").write_text("a = 1\n")
    (repo / "harmony" / "a.py").chmod(0o755)              # git records the executable bit
    assert provenance.tree_hash(repo / "harmony") != before


def test_commits_with_finds_the_commit_whose_folders_hold_those_files(repo):
    first = git(repo, "rev-parse", "HEAD")
    trees_one = provenance.source_trees(repo)
    (repo / "harmony" / "a.py").write_text("a = 2\n")
    trees_two = provenance.source_trees(repo)
    assert provenance.commits_with(trees_two, repo) == []          # not committed yet
    git(repo, "commit", "-q", "-am", "two")
    second = git(repo, "rev-parse", "HEAD")
    (repo / "notes.md").write_text("results only\n")              # a commit that leaves the code alone
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "three")
    third = git(repo, "rev-parse", "HEAD")
    assert provenance.commits_with(trees_one, repo) == [first]
    assert provenance.commits_with(trees_two, repo) == [third, second]


def test_the_command_names_the_commit_that_ran_whatever_git_commit_says(repo, tmp_path_factory, capsys):
    first = git(repo, "rev-parse", "HEAD")
    folder = tmp_path_factory.mktemp("records")
    ran = folder / "run.jsonl"
    env = {"git_commit": "0" * 40 + "-dirty", "source_trees": provenance.source_trees(repo)}
    ran.write_text(json.dumps({"record": "iteration"}) + "\n" + json.dumps({"record": "summary", "env": env}) + "\n")
    old = folder / "old.jsonl"
    old.write_text(json.dumps({"record": "summary", "env": {"git_commit": "abc"}}) + "\n")
    assert provenance.main(Namespace(records=[str(ran)], repo=str(repo), max_count=100)) == 0
    assert f"code of {first[:12]}" in capsys.readouterr().out
    assert provenance.main(Namespace(records=[str(old)], repo=str(repo), max_count=100)) == 1
    assert "no source_trees" in capsys.readouterr().out
    (repo / "harmony" / "a.py").write_text("a = 3\n")
    env["source_trees"] = provenance.source_trees(repo)
    ran.write_text(json.dumps({"record": "summary", "env": env}) + "\n")
    assert provenance.main(Namespace(records=[str(ran)], repo=str(repo), max_count=100)) == 1
    assert "uncommitted changes" in capsys.readouterr().out


def test_every_environment_record_carries_the_code_trees():
    from harmony.metrics import env_record
    trees = env_record("cpu")["source_trees"]
    assert set(trees) == {"harmony", "baselines"}
    assert all(isinstance(t, str) and len(t) == 40 for t in trees.values())


def test_every_environment_record_carries_the_nccl_settings(monkeypatch):
    """NCCL's environment changes how vPP's sends run (docs/performance.md entries 46 and 49), so an A/B
    over it must be readable from its records: every NCCL_ variable, and nothing else."""
    from harmony.metrics import env_record
    monkeypatch.setenv("NCCL_P2P_USE_CUDA_MEMCPY", "1")
    monkeypatch.setenv("NCCLX_NOT_NCCL", "x")
    assert env_record("cpu")["nccl_env"].get("NCCL_P2P_USE_CUDA_MEMCPY") == "1"
    assert "NCCLX_NOT_NCCL" not in env_record("cpu")["nccl_env"]
    monkeypatch.delenv("NCCL_P2P_USE_CUDA_MEMCPY")
    assert "NCCL_P2P_USE_CUDA_MEMCPY" not in env_record("cpu")["nccl_env"]


def test_a_record_names_the_re_run_list_that_made_it(monkeypatch):
    """experiments/device/rerun-stale.py's lists set HARMONY_RUN_TAG to their superseded/ REASON, and a run's
    environment record carries it as run_tag: the list's next call knows its own runs by it. Unset, the
    record has no run_tag at all (a bare key would mark every run fresh)."""
    from harmony.metrics import env_record
    monkeypatch.delenv("HARMONY_RUN_TAG", raising=False)
    assert "run_tag" not in env_record("cpu")
    monkeypatch.setenv("HARMONY_RUN_TAG", "other-host-sbs")
    assert env_record("cpu")["run_tag"] == "other-host-sbs"
