"""Atomic file writes: write to a temporary file in the same folder, then rename over the target."""

from __future__ import annotations

import errno
import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import IO, Any

import yaml

from probcl.errors import ConfigError, RunError

NAME_TOO_LONG = "a name in it is too long for the file system (most allow 255 bytes per name)"

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], object]) -> None:
    """Call ``write(fh)`` on a temporary file and rename it to ``path`` only if it succeeded."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise write_error(path, e) from None
        raise


def torch_load_problem(path: Path, error: Exception) -> str:
    """Why ``torch.load(path)`` failed, in one short clause for an error line: a file that is not a zip archive
    (what ``torch.save`` writes) is said to be one; torch's multi-line texts are cut to their cause."""
    if path.suffix == ".safetensors":  # safetensors' own reader failed: its header or its tensors' bytes
        text = " ".join(str(error).split())
        return f"it is not a readable safetensors file ({text[:120]}): wrong file, or cut short"
    if path.is_file() and not zipfile.is_zipfile(path):
        return "it is not a file torch.save wrote (not a zip archive): wrong file, or cut short"
    text = str(error)
    if "Weights only load failed" in text:  # torch's advice to load with weights_only=False is not ours to give
        cause = " ".join(text.split("WeightsUnpickler error:", 1)[-1].split(". ")[0].split())
        return f"it holds Python objects beside tensors ({cause}); save a state_dict (tensors only)"
    return " ".join(text.splitlines()[0].split()) if text.strip() else type(error).__name__


def file_identity(path: Path) -> dict[str, Any]:
    """What changes when a file (a checkpoint) is rewritten: its resolved path, size and modification time; the
    key of the caches derived from it."""
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def broken_link_on(path: Path) -> Path | None:
    """The first of ``path`` and its parents that is a symbolic link to nothing (no folder can be made there),
    or None."""
    return next((p for p in (path, *path.parents) if p.is_symlink() and not p.exists()), None)


def broken_link_message(link: Path) -> str:
    """What is wrong with a broken symbolic link, for an error message."""
    return f"{link} is a symbolic link to {os.readlink(link)}, which does not exist"


def write_error(path: Path, error: OSError) -> RunError:
    """The one-line error for a failed write (disk full, read-only folder, a broken link on the way, ...)."""
    broken = broken_link_on(path.parent)
    problem = output_path_problem(path)
    if broken is not None:
        cause, fix = broken_link_message(broken), "create its target or write elsewhere"
    elif problem is not None:
        cause, fix = problem, "choose another path"
    else:
        cause, fix = str(error.strerror or error), "free disk space or fix permissions"
    return RunError(
        f"cannot write {path}: {cause}. Nothing was lost: the previous {path.name} "
        f"(if any) is intact; {fix} and run the command again"
    )


def output_path_problem(path: Path) -> str | None:
    """Why no file can be written at ``path``, found before any work: a folder is there, a file stands where a
    folder of the path should be, or a name is longer than the file system allows. None when none of these."""
    try:
        if path.is_dir():
            return "it is a folder"
        for parent in path.parents:
            if parent.exists():
                return None if parent.is_dir() else f"{parent} is a file, not a folder"
    except OSError as e:  # another cause (a folder on the way that cannot be searched): the write will say
        if e.errno == errno.ENAMETOOLONG:
            return NAME_TOO_LONG
    return None


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode()))


def json_text(obj: Any) -> str:
    """``obj`` as the JSON text probcl writes: indented, keys in their order, numpy scalars as floats."""
    return json.dumps(obj, indent=2, sort_keys=False, default=float) + "\n"


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json_text(obj))


def json_object(path: Path) -> dict | None:
    """The JSON object ``path`` holds; None when it is missing, unreadable, not JSON or not an object."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # ValueError: JSONDecodeError and UnicodeDecodeError
        return None
    return content if isinstance(content, dict) else None


def refuse_foreign_side_file(out: Path, side: Path, role: str, kind: str, is_ours: Callable[[dict], bool]) -> None:
    """A command writes ``side`` (its ``role``: summary, config) next to ``--out out``; it may replace only an
    earlier file of its own ``kind`` (a JSON object ``is_ours`` accepts), never another command's (``--out
    RUN/eval.csv`` would put it over the run's eval.json): ConfigError before any work otherwise."""
    if not side.exists():
        return
    content = json_object(side)
    if content is None or not is_ours(content):
        raise ConfigError(
            f"--out {out} would write its {role} to {side}, which holds something else (not {kind}); "
            f"choose another --out name, or move that file away"
        )


def read_json(path: str | os.PathLike, default: Any = None) -> Any:
    """The JSON content of ``path``, or ``default`` when it does not exist. probcl writes its JSON files
    atomically, so an unreadable one was damaged from outside (a manual edit, a copy cut short): that is a
    :class:`RunError` naming the file and the fix, not a traceback."""
    path = Path(path)
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:  # ValueError: JSONDecodeError and UnicodeDecodeError
        problem = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
        raise RunError(
            f"cannot read {path}: {problem}. probcl writes it atomically, so it was damaged outside probcl; "
            f"restore it from a copy, or delete it and run the command again (what it recorded is redone)"
        ) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last silently: a config
    with ``lr`` twice would train with whichever came second)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges another mapping; not a key
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):  # `? [a, b]`: the safe loader's own message names it
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: str | os.PathLike, what: str = "config file") -> Any:
    """The YAML content of ``path`` (None when empty). A file that is not YAML is one :class:`ConfigError` line
    naming it: a syntax error with its line and column, a key given twice, or bytes that are not text (UTF-8, or
    UTF-16 with its byte-order mark)."""
    path = Path(path)
    try:
        return yaml.load(path.read_bytes(), Loader=_UniqueKeyLoader)  # a SafeLoader subclass: safe
    except yaml.reader.ReaderError as e:
        byte = f"0x{e.character:02x}" if isinstance(e.character, int) else repr(e.character)
        raise ConfigError(
            f"{what} {path} is not text: byte {byte} at position {e.position} is not UTF-8 ({e.reason}); "
            f"save it as UTF-8"
        ) from None
    except yaml.MarkedYAMLError as e:  # a syntax error: what, and where
        where = f" at line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1}" if e.problem_mark else ""
        what_failed = f"{e.context}: " if e.context else ""
        raise ConfigError(f"{what} {path} is not valid YAML: {what_failed}{e.problem}{where}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} {path} is not valid YAML: {' '.join(str(e).split())}") from None
