"""Static checks of patches/: stacks.toml, series membership, DEP-3 headers and topics."""

from __future__ import annotations

import pathlib

from packaging.utils import canonicalize_name

from ..model import pullrequests
from ..model.errors import ConfigError
from ..model.series import (
    PATCH_NAME,
    SERIES_FILE,
    Patch,
    iter_series_dirs,
    load_series,
    read_series,
)
from ..model.stacks import load


def lint(patches_dir: pathlib.Path) -> list[str]:
    """Every problem found, one line each naming the file at fault."""
    problems: list[str] = []
    try:
        catalog = load(patches_dir / "stacks.toml")
    except ConfigError as exc:
        return [str(exc)]
    try:
        cut = {e.key for e in pullrequests.load(patches_dir / "stacks.toml")}
    except ConfigError as exc:
        return [str(exc)]
    for project, version, directory in iter_series_dirs(patches_dir):
        where = directory.relative_to(patches_dir.parent)
        for_prs = (canonicalize_name(project), version) in cut
        if not for_prs and f"{canonicalize_name(project)}=={version}" not in catalog.artifacts:
            problems.append(f"{where}: {project} {version} is not pinned in patches/stacks.toml")
        if not (directory / SERIES_FILE).is_file():
            problems.append(f"{where}: no series file")
            continue
        try:
            listed = [name for name, _ in read_series(directory)]
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        on_disk = sorted(p.name for p in directory.glob("*.patch"))
        for name in sorted(set(on_disk) - set(listed)):
            problems.append(f"{where}/{name}: not listed in series")
        for name in listed:
            if listed.count(name) > 1:
                problems.append(f"{where}/{SERIES_FILE}: lists {name} more than once")
            if not PATCH_NAME.fullmatch(name):
                problems.append(f"{where}/{name}: name is not NNNN-topic.patch")
            if name not in on_disk:
                problems.append(f"{where}/{SERIES_FILE}: lists {name}, which does not exist")
                continue
            try:
                patch = Patch.load(directory / name)
            except ConfigError as exc:
                problems.append(str(exc))
                continue
            problems.extend(f"{where}/{name}: {p}" for p in patch.header_problems())
        numbers = [n[:4] for n in listed]
        if numbers != sorted(numbers):
            problems.append(f"{where}/{SERIES_FILE}: patches are not in NNNN order")
        problems.extend(_topic_problems(patches_dir, project, version, where, for_prs=for_prs))
    return sorted(dict.fromkeys(problems))


def _topic_problems(
    patches_dir: pathlib.Path, project: str, version: str, where: object, *, for_prs: bool
) -> list[str]:
    """Unresolved patches, topics carried twice, topics the project requires and lacks (a
    pull-request series carries part of the work: its Depends-On lines instead)."""
    try:
        series = load_series(patches_dir, project, version)
    except ConfigError:
        return []  # reported above, file by file
    if series is None:
        return []
    problems = []
    seen: dict[str, str] = {}
    for patch in series.patches:
        for topic in patch.topics:
            if topic in seen:
                problems.append(f"{where}/{patch.name}: topic {topic!r} is also {seen[topic]}'s")
            seen.setdefault(topic, patch.name)
    try:
        problems.extend(series.refusals(topics=not for_prs))
        if for_prs:
            problems.extend(pullrequests.dependency_problems(series))
            problems.extend(pullrequests.recut_problems(series))
    except ConfigError as exc:  # a project the registry does not know
        problems.append(f"{where}: {exc}")
    root = str(patches_dir.parent) + "/"
    return [p.replace(root, "") for p in problems]
