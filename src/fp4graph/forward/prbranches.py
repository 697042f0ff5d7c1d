"""Pull-request branches on real upstream history, from a pull-request series.

A pull-request series (``model.pullrequests``) is a patch queue on one upstream commit.
:func:`carry` brings it onto the upstream branch the clone has now, with the patch-queue
rebase of ``forward.rebase`` (a patch that conflicts stops the carry there and is
reported with every later one, as ``rebase`` does; nothing is dropped silently).
:func:`build` then makes one branch per patch: the upstream commit, the patches it
declares on ``Depends-On:`` (transitively, in series order), and its own, each applied
with ``git am`` (exact context) as the user (author and committer) at a fixed date, so a branch whose
dependencies are exactly another branch holds that branch's very commits (a stacked
pull request) and an independent one sits on upstream alone.  A patch that does not
apply on its declared dependencies needs one it does not declare: reported, not built.
Commit messages on the branches carry no DEP-3 lines (those are ours).
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import subprocess
import tempfile
from collections.abc import Sequence

from ..model import pullrequests
from ..model.errors import PatchError
from ..model.log import log
from ..model.series import DEP3_FIELD, Patch, Series
from .rebase import BASE_REF, format_patch, is_empty, run_todo
from .sources import SourceRepo, git, identity_env, with_author

CARRIED_REF = "refs/fp4graph/carried"
# Our header lines, never upstream's: stripped from the messages on PR branches.
_OURS = frozenset({
    "Description", "Topic", "Origin", "Forwarded", "Applied-Upstream", "Last-Update",
    pullrequests.DEPENDS_FIELD, "Bench", "Pending",
})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CarriedPatch:
    patch: Patch
    status: str  # "carried" | "merged" (empty on the new base) | "conflict" | "pending"
    detail: str
    text: str | None  # the patch as it applies on the target (None unless carried)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Branch:
    patch: Patch
    name: str
    needs: tuple[str, ...]  # topics below it, in series order
    status: str  # "built" | "conflict" | "blocked" | "merged" | "pending"
    detail: str
    commit: str | None = None
    parent: str | None = None  # the commit below its own (upstream or its last dependency)
    stacked_on: str | None = None  # the branch directly below, when it is exactly one

    @property
    def built(self) -> bool:
        return self.commit is not None


_CHANGE_TYPE = re.compile(r"^(?P<type>[a-z]+)(?:\([^)]*\))?!?: ")


def branch_name(patch: Patch) -> str:
    """What the change is: ``<type>/<topic>`` for a conventional subject (``fix(jit): ...``
    gives ``fix/<topic>``), else the topic."""
    topic = patch.topic.rstrip("-.")
    match = _CHANGE_TYPE.match(patch.subject)
    return f"{match['type']}/{topic}" if match else topic


def _ours(line: str) -> bool:
    m = DEP3_FIELD.match(line)
    return bool(m) and (m["name"] in _OURS or m["name"].startswith("Bug"))  # type: ignore[index]


def upstream_message(patch_text: str) -> str:
    """``patch_text`` with our DEP-3 lines taken out of its message."""
    head, sep, rest = patch_text.partition("\n---\n")
    kept = [ln for ln in head.split("\n") if not _ours(ln)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).rstrip("\n") + "\n" + sep + rest


def upstream_prose(patch: Patch) -> str:
    """The patch's message body without our DEP-3 lines (what the commit says upstream)."""
    return "\n".join(ln for ln in patch.body.splitlines() if not _ours(ln)).strip()


def _rejected(output: str) -> list[str]:
    """The files ``git am`` could not apply, from its messages."""
    return sorted(set(re.findall(r"error: (?:patch failed: )?([^:\s]+):", output)))


def _first_line(result: subprocess.CompletedProcess[str]) -> str:
    text = (result.stderr + result.stdout).strip()
    return next((ln for ln in text.splitlines() if ln.startswith(("error:", "fatal:"))), text[-200:])


def carry(repo: SourceRepo, series: Series, target: str, work: pathlib.Path) -> list[CarriedPatch]:
    """The series' patches as they apply on ``target``: applied on the series' own
    upstream commit (``repo.base``) and, when ``target`` is another commit, rebased onto
    it (forward.rebase's todo run).  A patch whose change ``target`` already has is
    "merged"; the first that conflicts and every later one are reported, not carried."""
    git(repo.path, "checkout", "-q", "-B", "fp4graph/series", repo.base)
    commits = []
    for patch in series.patches:
        result = git(repo.path, "am", "-3", "--keep-cr", str(patch.path.resolve()), check=False)
        if result.returncode != 0:
            unmerged = git(repo.path, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()
            git(repo.path, "am", "--abort", check=False)
            raise PatchError(
                f"{patch.path}: does not apply to {repo.project} {repo.version} at "
                f"{repo.base[:12]} ({repo.origin}) with `git am -3`: "
                f"{'conflicts in ' + ', '.join(unmerged) if unmerged else _first_line(result)}; "
                "carry the series with `python -m fp4graph rebase` and `refresh`"
            )
        commits.append(git(repo.path, "rev-parse", "HEAD").stdout.strip())
    if target == repo.base:
        return [CarriedPatch(patch=p, status="carried", detail=f"on {target[:12]}",
                             text=format_patch(repo.path, c)) for p, c in zip(series.patches, commits, strict=True)]
    git(repo.path, "update-ref", BASE_REF, target)
    git(repo.path, "checkout", "-q", "-B", "fp4graph/carried", target)
    stopped_at, unmerged, carried, failure = run_todo(repo.path, target, commits, work / "todo")
    if stopped_at < len(commits):
        git(repo.path, "update-ref", CARRIED_REF, "HEAD")
        git(repo.path, "rebase", "--abort", check=False)
    out = []
    for i, patch in enumerate(series.patches):
        if i < stopped_at:
            commit = carried[i]
            if is_empty(repo.path, commit):
                out.append(CarriedPatch(patch=patch, status="merged", text=None,
                                        detail=f"{target[:12]} already has this change"))
            else:
                out.append(CarriedPatch(patch=patch, status="carried", detail=f"onto {target[:12]}",
                                        text=format_patch(repo.path, commit)))
        elif i == stopped_at:
            out.append(CarriedPatch(patch=patch, status="conflict", text=None,
                                    detail="conflicts in " + (", ".join(unmerged) or failure)))
        else:
            out.append(CarriedPatch(patch=patch, status="pending", text=None,
                                    detail=f"not carried: the carry stopped at {series.patches[stopped_at].name}"))
    return out


def build(
    repo: SourceRepo, carried: Sequence[CarriedPatch], target: str, identity: tuple[str, str],
    *, stacked: bool = False,
) -> list[Branch]:
    """One branch per carried patch, on ``target`` plus its dependencies (see module doc),
    its commits by ``identity``; ``stacked``: every earlier patch is a dependency (a release
    series, whose patches declare none)."""
    patches = [c.patch for c in carried]
    branches: list[Branch] = []
    tips: dict[int, str] = {}  # patch index -> its commit on its own branch
    with tempfile.TemporaryDirectory(prefix="fp4graph-prs-") as tmp:
        files = {}
        for i, c in enumerate(carried):
            if c.text is not None:
                files[i] = pathlib.Path(tmp) / f"{i:04d}.patch"
                files[i].write_text(with_author(upstream_message(c.text), identity), encoding="utf-8")
        for i, c in enumerate(carried):
            chain = list(range(i + 1)) if stacked else pullrequests.closure(patches, i)
            needs = tuple(t for j in chain[:-1] for t in patches[j].topics)
            name = branch_name(c.patch)
            if c.status != "carried":
                branches.append(Branch(patch=c.patch, name=name, needs=needs, status=c.status,
                                       detail=c.detail))
                continue
            missing = [patches[j].name for j in chain[:-1] if j not in files or j not in tips]
            if missing:
                branches.append(Branch(patch=c.patch, name=name, needs=needs, status="blocked",
                                       detail=f"needs {', '.join(missing)}, which did not carry or build"))
                continue
            git(repo.path, "checkout", "-q", "--detach", target)
            failed = None
            for j in chain:
                # Exact context (no three-way merge): a branch must apply as it stands.
                result = git(repo.path, "am", "--keep-cr", str(files[j]), check=False,
                             env=identity_env(identity))
                if result.returncode != 0:
                    unmerged = _rejected(result.stderr + result.stdout)
                    git(repo.path, "am", "--abort", check=False)
                    failed = (patches[j], unmerged)
                    break
            if failed is not None:
                below = ", ".join(patches[j].topic for j in chain[:-1]) or "nothing"
                branches.append(Branch(
                    patch=c.patch, name=name, needs=needs, status="conflict",
                    detail=(f"{failed[0].name} does not apply on {target[:12]} + {below} "
                            f"({', '.join(failed[1]) or 'no clean apply'}): it needs an earlier patch "
                            f"it does not declare ({pullrequests.DEPENDS_FIELD}:) or a rebase"),
                ))
                continue
            head = git(repo.path, "rev-parse", "HEAD").stdout.strip()
            parent = git(repo.path, "rev-parse", "HEAD^").stdout.strip()
            tips[i] = head
            git(repo.path, "branch", "-f", name, head)
            deps = chain[:-1]
            stacked_on = None
            if deps and tips.get(deps[-1]) == parent:
                stacked_on = branch_name(patches[deps[-1]])
            log(f"pr branch {name}: {head[:12]} on {stacked_on or target[:12]}")
            branches.append(Branch(patch=c.patch, name=name, needs=needs, status="built",
                                   detail=f"on {stacked_on or 'upstream ' + target[:12]}",
                                   commit=head, parent=parent, stacked_on=stacked_on))
    git(repo.path, "checkout", "-q", "--detach", target)
    return branches
