"""Legitimate structured repetition (issue 24): answers a user asked for
that repeat one short, mostly non-letter copy exactly, far past the
prose loop bound (max(4 copies, 400 characters)): empty grids and
tables, arrays of zeros, runs of one character, rules and borders.

Each entry is (name, text). Every text's longest exact periodic run is
under ``repetition.STRUCTURED_SPAN`` (the longest: 3,897 characters, the
95-row timesheet); all but the issue's examples at their natural size are
over 2,000 characters (``test_faithful_structured`` pins that they pass,
and their length)."""

from __future__ import annotations

import orjson


def _grid(n: int, w: int = 3) -> str:
    """An empty n×n ASCII grid of cells ``w`` wide."""
    border = "+" + ("-" * w + "+") * n + "\n"
    row = "|" + (" " * w + "|") * n + "\n"
    return border + (row + border) * n


def _c_table(n: int, per_row: int = 16) -> str:
    rows = "".join("    " + "0, " * per_row + "\n" for _ in range(n // per_row))
    return f"static const uint8_t table[{n}] = {{\n{rows}}};\n"


def _c_braced_rows(n: int, per_row: int = 16) -> str:
    row = "    {" + ", ".join(["0"] * per_row) + "},\n"
    return "int grid[][16] = {\n" + row * (n // per_row) + "};\n"


def _timesheet(rows: int, blank: str = "| | | | |\n") -> str:
    return "| Date | Start | End | Hours |\n|---|---|---|---|\n" + blank * rows


def _byte_table(n: int, per_row: int = 12) -> str:
    out = ["unsigned char buf[] = {\n"]
    for i in range(0, n, per_row):
        out.append("    " + " ".join("0x00," for _ in range(min(per_row, n - i))) + "\n")
    out.append("};\n")
    return "".join(out)


def _sudoku(boards: int, titled: bool = True) -> str:
    sep = "+-------+-------+-------+\n"
    row = "| . . . | . . . | . . . |\n"
    board = sep + (row * 3 + sep) * 3
    if not titled:
        return "\n".join([board] * boards)
    return "".join(f"Puzzle {i + 1}:\n\n{board}\n" for i in range(boards))


def _chess() -> str:
    return (
        "  a b c d e f g h\n"
        "8 r n b q k b n r\n7 p p p p p p p p\n"
        + "".join(f"{r} . . . . . . . .\n" for r in (6, 5, 4, 3))
        + "2 P P P P P P P P\n1 R N B Q K B N R\n"
    )


def _box(width: int, height: int, h: str = "-", v: str = "|", c: str = "+") -> str:
    top = c + h * (width - 2) + c + "\n"
    return top + (v + " " * (width - 2) + v + "\n") * (height - 2) + top


def _unicode_box(width: int, height: int) -> str:
    inner = width - 2
    side = "│" + " " * inner + "│\n"
    return "┌" + "─" * inner + "┐\n" + side * (height - 2) + "└" + "─" * inner + "┘\n"


def _numpy_zeros(n: int) -> str:
    row = "[" + ", ".join(["0."] * n) + "]"
    return "array([" + (",\n       ".join([row] * n)) + "])"


def _python_matrix(n: int) -> str:
    return "grid = [\n" + ("    [" + ", ".join(["0"] * n) + "],\n") * n + "]\n"


def _signup(lines: int) -> str:
    head = "Sign-up sheet\n\n"
    return head + "".join(
        f"{i}. Name: ____________ Signature: ____________\n" for i in range(1, lines + 1)
    )


POINTS_64 = "[" + ", ".join(['{"x": 0, "y": 0}'] * 64) + "]"
POINTS_200 = "[" + ", ".join(['{"x": 0, "y": 0}'] * 200) + "]"
POINTS_INDENTED = orjson.dumps([{"x": 0, "y": 0}] * 64, option=orjson.OPT_INDENT_2).decode()

STRUCTURED: list[tuple[str, str]] = [
    ("empty 9x9 grid", "Here is an empty 9×9 grid:\n\n" + _grid(9) + "\nFill it in!"),
    ("empty 20x20 grid", _grid(20)),
    ("C table of 256 zeros", _c_table(256)),
    ("C table of 1024 zeros", _c_table(1024)),
    ("C braced rows of zeros", _c_braced_rows(1024)),
    ("64 identical JSON points", POINTS_64),
    ("200 identical JSON points", POINTS_200),
    ("64 identical JSON points, indented", POINTS_INDENTED),
    ("empty 40-row timesheet", _timesheet(40)),
    ("empty 95-row wide timesheet", _timesheet(95, "|            |         |       |       |\n")),
    ("600 a's", "Here you go:\n\n" + "a" * 600),
    ("3000 a's", "a" * 3000),
    ("2048 A's (base64 of zero bytes)", "A" * 2048 + "==\n"),
    ("ASCII-art border", _box(60, 40)),
    ("star border", _box(70, 40, "*", "*", "*")),
    ("unicode box", _unicode_box(80, 40)),
    ("---- rules", "".join("Section\n\n" + "-" * 80 + "\n" for _ in range(3)) + "-" * 80 * 30),
    ("===== banners", ("=" * 79 + "\n") * 40),
    ("long string of dashes", "-" * 3500),
    ("CSV of empty cells", "a,b,c,d,e,f,g,h\n" + ",,,,,,,\n" * 400),
    ("NumPy zeros 20x20", _numpy_zeros(20)),
    ("Python 30x30 matrix of zeros", _python_matrix(30)),
    ("0x00 byte table", _byte_table(512)),
    ("Sudoku boards", _sudoku(6)),
    ("Sudoku boards, untitled", _sudoku(10, titled=False)),
    ("chess board with dots", _chess()),
    ("dot grid 32x32", (". " * 32 + "\n") * 32),
    ("HTML table of empty cells", "<table>\n" + ("<tr>" + "<td></td>" * 4 + "</tr>\n") * 70),
    (
        "LaTeX zero matrix",
        "\\begin{pmatrix}\n" + ("0 & " * 5 + "0 \\\\\n") * 120 + "\\end{pmatrix}",
    ),
    ("empty checklist", "- [ ] \n" * 450),
    ("YAML zeros", "values:\n" + "  - 0\n" * 500),
    ("numbered sign-up sheet", _signup(70)),
    ("fill-in form lines", "Name: ______________________________\n" * 90),
    ("empty JSON objects", "[" + "{}, " * 800 + "{}]"),
    ("zeros in a tool-free JSON answer", '{"matrix": [' + "0, " * 1100 + "0]}"),
]
