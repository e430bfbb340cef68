"""An earlier revision of this repository, ready to run as a bench gateway (`bench compare`).

`materialise` exports the revision's tree (`git archive`) into a cache folder,
`<cache>/<full sha>/src`, and builds a virtualenv for it once, `<cache>/<full sha>/venv`, with
the dependencies of that revision's pyproject (`pip install <src>`). Both are reused on later
calls: the tree appears by an atomic rename once complete, the virtualenv counts only when its
stamp file was written after pip succeeded. This module runs git, tar, venv and pip; it starts
no gateway. Two first builds of the same revision at the same time are not guarded against.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import trio

from bench.processes import ROOT, SuiteError
from bench.suite import GatewayCode

_STAMP = ".gateway-bench-complete"
_GIT_TIMEOUT_S = 120.0
_PIP_TIMEOUT_S = 900.0


def default_cache() -> Path:
    """`$XDG_CACHE_HOME/gateway-bench`, or `~/.cache/gateway-bench`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gateway-bench"


@dataclass(frozen=True)
class Revision:
    rev: str  # as given
    sha: str  # the full commit id
    src: Path  # its tree
    python: str  # the interpreter to run its gateway with

    @property
    def code(self) -> GatewayCode:
        return GatewayCode(self.python, self.src)


async def _run(argv: list[str], *, what: str, cwd: Path | None = None) -> bytes:
    """`argv`'s stdout; a SuiteError naming `what` when it fails or cannot start."""
    try:
        with trio.fail_after(_GIT_TIMEOUT_S):
            done = await trio.run_process(
                argv,
                cwd=None if cwd is None else str(cwd),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    except (OSError, trio.TooSlowError) as exc:
        raise SuiteError(f"{what}: {exc!r}") from None
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip()[-2000:]
        raise SuiteError(f"{what}: exit status {done.returncode}: {tail}")
    return done.stdout


async def resolve(rev: str, *, repo: Path = ROOT) -> str:
    """The full commit id `rev` names in `repo`; a SuiteError if it names none."""
    if rev.startswith("-"):  # would be read as an option
        raise SuiteError(f"not a revision: {rev!r}")
    try:
        out = await _run(
            ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
            what=f"git rev-parse {rev}",
        )
    except SuiteError:
        raise SuiteError(f"{rev!r} is not a commit of the repository in {repo}") from None
    return out.decode().strip()


async def source_tree(
    rev: str, *, repo: Path = ROOT, cache: Path | None = None
) -> tuple[str, Path]:
    """`rev`'s full commit id and its tree under `<cache>/<sha>/src`, exported unless there.
    Cancelling it stops git or tar and removes the partial export."""
    sha = await resolve(rev, repo=repo)
    folder = (cache or default_cache()) / sha
    src = folder / "src"
    if await trio.Path(src).is_dir():
        return sha, src
    await trio.Path(folder).mkdir(parents=True, exist_ok=True)
    partial = folder / f"src.partial-{secrets.token_hex(4)}"
    await trio.Path(partial).mkdir()
    tar = folder / f"{partial.name}.tar"
    try:
        await _run(
            ["git", "-C", str(repo), "archive", "--format=tar", f"--output={tar}", sha],
            what=f"git archive {sha}",
        )
        await _run(["tar", "-xf", str(tar), "-C", str(partial)], what=f"tar -x {tar}")
        try:
            await trio.Path(partial).rename(src)
        except OSError:  # another run finished it first
            if not await trio.Path(src).is_dir():
                raise
    finally:
        with trio.CancelScope(shield=True):  # leave no half-exported tree behind
            await trio.Path(tar).unlink(missing_ok=True)
            if await trio.Path(partial).exists():
                await trio.to_thread.run_sync(shutil.rmtree, partial)
    return sha, src


async def virtualenv(src: Path, *, log: Path) -> str:
    """The python of `<src>/../venv` with `src` installed (built unless its stamp is there);
    pip's output goes to `log`. Bounded (15 min); cancelling it leaves no stamp."""
    venv = src.parent / "venv"
    python = venv / "bin" / "python"
    stamp = venv / _STAMP
    if await trio.Path(stamp).exists():
        return str(python)
    if await trio.Path(venv).exists():  # an interrupted build
        await trio.to_thread.run_sync(shutil.rmtree, venv)
    await _run([sys.executable, "-m", "venv", str(venv)], what=f"python -m venv {venv}")
    argv = [str(python), "-m", "pip", "install", "--disable-pip-version-check", str(src)]
    try:
        with trio.fail_after(_PIP_TIMEOUT_S):
            done = await trio.run_process(
                argv, capture_stdout=True, stderr=subprocess.STDOUT, check=False
            )
    except trio.TooSlowError:
        raise SuiteError(f"pip install {src} took over {_PIP_TIMEOUT_S:.0f} s") from None
    await trio.Path(log).write_bytes(done.stdout)
    if done.returncode != 0:
        tail = done.stdout.decode(errors="replace")[-2000:]
        raise SuiteError(f"pip install {src} failed (log: {log}):\n{tail}")
    await trio.Path(stamp).write_text("")
    return str(python)


async def materialise(
    rev: str, *, repo: Path = ROOT, cache: Path | None = None, python: str | None = None
) -> Revision:
    """`rev`'s tree in the cache and an interpreter for it: `python` as is when given, else its
    own virtualenv (built once)."""
    sha, src = await source_tree(rev, repo=repo, cache=cache)
    if python is None:
        python = await virtualenv(src, log=src.parent / "pip.log")
    return Revision(rev, sha, src, python)


async def describe_tree(repo: Path = ROOT) -> str:
    """`<HEAD sha>`, plus ` with uncommitted changes` when tracked files differ from it."""
    sha = (await _run(["git", "-C", str(repo), "rev-parse", "HEAD"], what="git rev-parse")).decode()
    status = await _run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
        what="git status",
    )
    return sha.strip() + (" with uncommitted changes" if status.strip() else "")
