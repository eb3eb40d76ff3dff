"""The set of CDI devices a node's runtime can resolve, from its spec directories.

Mirrors the runtime's cache: only ``*.json`` and ``*.yaml`` directly inside each directory,
directories in order with later ones taking priority, a device defined by two files of the
same directory dropped as a conflict, and a broken file reported and ignored. A scan never
stops on one bad file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from webhook.api.cdireaders import version_key
from webhook.node.spec import CDIError, Spec, parse_spec

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
MAX_SPEC_BYTES = 16 * 1024 * 1024


@dataclass
class Registry:
    #: qualified device name -> path of the spec that defines it
    devices: dict[str, str] = field(default_factory=dict)
    #: path -> reason, for files that failed to load and for conflicts
    errors: dict[str, list[str]] = field(default_factory=dict)
    specs: list[Spec] = field(default_factory=list)

    def kinds(self) -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        for qualified in self.devices:
            kind, _, name = qualified.partition("=")
            out.setdefault(kind, set()).add(name)
        return {k: frozenset(v) for k, v in out.items()}

    def error_list(self) -> list[tuple[str, str]]:
        return [(p, r) for p, reasons in sorted(self.errors.items()) for r in reasons]


def spec_files(directory: str) -> list[str]:
    """Spec files of one directory in name order; a missing directory has none."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except OSError:
        raise
    out = []
    for name in names:
        if not (name.endswith(".json") or name.endswith(".yaml")):
            continue
        path = os.path.join(directory, name)
        # Like the runtime's walk: real directories are skipped; anything else, broken
        # symlinks included, is read and reported if it fails.
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            out.append(path)
    return out


def load_file(path: str) -> Spec:
    try:
        size = os.path.getsize(path)
        if size > MAX_SPEC_BYTES:
            raise CDIError(f"file is {size} bytes, over the {MAX_SPEC_BYTES}-byte limit")
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise CDIError("file is not UTF-8 text") from exc
    except OSError as exc:
        raise CDIError(f"cannot read: {exc.strerror}") from exc
    return parse_spec(text, path)


def readable_up_to(dirs: Iterable[str], reg: Registry
                   ) -> tuple[tuple[str, ...], dict[str, dict[str, frozenset[str]]]]:
    """The spec versions of the files ``reg`` (a scan of ``dirs``) loaded, and for each
    but the newest, the devices a library reading up to that version resolves: the same
    files without the newer ones (a device a newer file overrode or conflicted with may
    come back). What a runtime reading up to any version resolves follows from these
    (``Inventory.kinds_read_by``). The files are not read again: what the scan loaded is
    what counts."""
    dirs = list(dirs)
    loaded = {s.path: s for s in reg.specs}

    def reader(reads: str) -> Callable[[str], Spec]:
        """The scan's files as a library reading up to ``reads`` loads them: a newer one is
        refused whole, as a file the scan refused."""
        def load(path: str) -> Spec:
            spec = loaded.get(path)
            if spec is None or version_key(spec.version) > version_key(reads):
                raise CDIError(f"not read by a CDI library reading up to {reads}")
            return spec
        return load

    versions = tuple(sorted({s.version for s in reg.specs}, key=version_key))
    return versions, {v: scan(dirs, reader(v)).kinds() for v in versions[:-1]}


def scan(dirs: Iterable[str] = DEFAULT_SPEC_DIRS,
         loader: Callable[[str], Spec] = load_file) -> Registry:
    """Scan spec directories; ``loader`` lets the agent substitute a file's last good parse
    while it is being rewritten (and ``readable_up_to`` an older library's view of them)."""
    reg = Registry()
    for directory in dirs:
        try:
            files = spec_files(directory)
        except OSError as exc:
            reg.errors.setdefault(directory, []).append(f"cannot list directory: {exc.strerror}")
            continue
        level: dict[str, str] = {}  # devices defined in this directory
        conflicts: set[str] = set()
        for path in files:
            try:
                spec = loader(path)
            except CDIError as exc:
                reg.errors.setdefault(path, []).append(str(exc))
                continue
            reg.specs.append(spec)
            for dev in spec.devices:
                q = spec.qualified(dev)
                if q in level:
                    conflicts.add(q)
                    first = level[q]
                    for here, other in ((first, path), (path, first)):
                        reg.errors.setdefault(here, []).append(
                            f"conflicting device {q} (also in {other})")
                else:
                    level[q] = path
        for q in conflicts:
            level.pop(q, None)
        # A later directory has priority over earlier ones.
        reg.devices.update(level)
        for q in conflicts:
            reg.devices.pop(q, None)
    return reg
