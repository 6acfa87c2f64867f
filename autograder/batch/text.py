"""Text that a submission controls, made safe once where it enters the batch.

A student decides much of the text the grader writes: exception messages and output tails
that come back from the sandbox (the feedback and reason of every question), the names of
the student's folder and notebook (a zip made on Windows gives latin-1 bytes that are not
UTF-8), the text of a saved result an older grader wrote. Any of it may hold

* lone surrogates (``chr(0xD800)`` in an exception message; undecodable bytes of a folder name,
  which ``os.listdir`` returns as surrogates): every UTF-8 file and the terminal refuse to
  encode them (``UnicodeEncodeError``: once, no grades.csv for anybody);
* control characters: ANSI escape sequences that rewrite the instructor's terminal, carriage
  returns that hide a line, bidirectional overrides that reorder what is shown;
* any length.

:func:`clean` makes one such string safe: surrogates become their ``\\udXXX`` escape, control
and bidi characters their ``\\xNN`` / ``\\uXXXX`` escape (newlines and tabs kept where asked),
and the text is cut to a length. :func:`clean_result` applies it to every string of a result
(from :func:`autograder.batch.submission.grade_task`, ``error_result``, a saved result loaded
from ``ROOT/.autograder/results/``); :func:`name` gives a folder or file name its stable,
printable id (undecodable bytes as ``\\xe9``). :func:`csv_field` neutralises a CSV field a
spreadsheet would run as a formula. Nothing here imports the rest of the grader.
"""
from __future__ import annotations

import re

MAX_CHARS = 20_000       # one string of a result (a question's feedback is a few hundred)
MAX_NAME = 200           # a student, assignment or file name

# C0 and C1 controls and DEL; bidi embeddings, overrides and isolates; line/paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                                "\u202a-\u202e\u2066-\u2069]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text, limit: int = MAX_CHARS, newlines: bool = True) -> str:
    """``text`` (anything: ``str()`` of it) as a string every UTF-8 file and terminal takes
    and shows as it is: lone surrogates and control characters escaped (``newlines``: keep
    ``\\n`` and ``\\t``; ``\\r`` is always escaped), at most ``limit`` characters."""
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception:  # noqa: BLE001 - an object whose __str__ fails is described, not raised
            text = f"<{type(text).__name__} that cannot be shown>"
    if len(text) > 4 * limit:
        text = text[:4 * limit]                  # each character escapes to at most 6
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = (_CONTROL_BUT_LINES if newlines else _CONTROL).sub(_escape, text)
    return text if len(text) <= limit else text[:max(0, limit - 3)] + "..."


def name(raw: str) -> str:
    """A file or folder name as ``os.listdir`` gives it, as a printable id: bytes that were not
    UTF-8 (surrogates from ``surrogateescape``) as ``\\xNN``, control characters escaped; the
    same name always gives the same id."""
    try:
        text = raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:          # a surrogate surrogateescape did not make
        text = raw
    return clean(text, MAX_NAME, newlines=False)


def clean_result(value):
    """A result (dicts, lists, strings, numbers) with every string, key included, :func:`clean`."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(k, MAX_NAME) if isinstance(k, str) else k: clean_result(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_result(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return clean(value)


def csv_field(value):
    """A CSV field that a spreadsheet shows as text: one that starts with ``= + - @``, a tab or
    a carriage return gets a leading ``'`` (it would otherwise be read as a formula)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
