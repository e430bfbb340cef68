"""Materialising an earlier revision: its tree in the cache (once), its interpreter, and the
check that a gateway imports the code it was given."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.processes import SuiteError
from bench.revision import materialise, resolve, source_tree, virtualenv
from bench.suite import GatewayCode, imported_gateway


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Two commits: `one` has a.txt = "1"; `two` has a.txt = "2" and pkg/b.txt."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("1")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    (repo / "a.txt").write_text("2")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "b.txt").write_text("b")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "two")
    return repo


async def test_the_cache_gets_the_revisions_tree(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = git(repo, "rev-parse", "HEAD~1")
    sha, src = await source_tree("HEAD~1", repo=repo, cache=cache)
    assert sha == first and src == cache / first / "src"
    assert sorted(p.name for p in src.iterdir()) == ["a.txt"]
    assert (src / "a.txt").read_text() == "1"
    sha, src = await source_tree("HEAD", repo=repo, cache=cache)
    assert (src / "a.txt").read_text() == "2" and (src / "pkg" / "b.txt").read_text() == "b"
    assert sorted(p.name for p in (cache / sha).iterdir()) == ["src"]  # nothing half-done left


async def test_a_second_call_reuses_the_tree(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _, src = await source_tree("HEAD", repo=repo, cache=cache)
    (src / "marker").write_text("kept")
    git(repo, "commit", "-q", "--allow-empty", "-m", "three")  # HEAD moves on
    sha, again = await source_tree("HEAD~1", repo=repo, cache=cache)
    assert again == src and (again / "marker").read_text() == "kept"
    assert await resolve(sha[:8], repo=repo) == sha  # abbreviated ids resolve to the same


@pytest.mark.parametrize("rev", ["no-such-branch", "HEAD~5", "--all", ""])
async def test_a_bad_revision_is_a_clear_error(repo: Path, tmp_path: Path, rev: str) -> None:
    with pytest.raises(SuiteError, match="is not a commit|not a revision"):
        await source_tree(rev, repo=repo, cache=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


async def test_not_a_repository_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="is not a commit of the repository in"):
        await resolve("HEAD", repo=tmp_path)


async def test_a_given_interpreter_is_used_as_is(repo: Path, tmp_path: Path) -> None:
    base = await materialise("HEAD", repo=repo, cache=tmp_path / "cache", python="/opt/py")
    assert (base.rev, base.python, base.code) == (
        "HEAD",
        "/opt/py",
        GatewayCode("/opt/py", base.src),
    )
    assert not (base.src.parent / "venv").exists()


async def test_a_stamped_virtualenv_is_reused(tmp_path: Path) -> None:
    src = tmp_path / "sha" / "src"
    venv = tmp_path / "sha" / "venv"
    venv.mkdir(parents=True)
    (venv / ".gateway-bench-complete").write_text("")
    python = await virtualenv(src, log=tmp_path / "pip.log")  # nothing to build: no pip run
    assert python == str(venv / "bin" / "python") and not (tmp_path / "pip.log").exists()


async def test_the_gateway_imported_is_the_sources(tmp_path: Path) -> None:
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "__init__.py").write_text("")
    module = await imported_gateway(GatewayCode(sys.executable, tmp_path))
    assert module == (tmp_path / "gateway" / "__init__.py").resolve()


async def test_a_source_without_the_gateway_is_refused(tmp_path: Path) -> None:
    # This interpreter finds `gateway` elsewhere (the checkout it is installed from) or not at
    # all: either way not the code asked for.
    with pytest.raises(SuiteError, match="gateway"):
        await imported_gateway(GatewayCode(sys.executable, tmp_path))
    with pytest.raises(SuiteError, match="could not import gateway"):
        await imported_gateway(GatewayCode(str(tmp_path / "no-python"), tmp_path))
