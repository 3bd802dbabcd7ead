"""Corpus cases (tests/data/json_repair_corpus.json) streamfix gets wrong today,
each with how (``accepted``: a guess sent as valid; ``refused``: a certain
reply flagged invalid; ``wrong``: another value sent as valid) and the class
of issue 36 it belongs to (1-6; ``6+``: a certain repair the issue does not
name), with why.

``tests/test_json_corpus.py`` expects each of these to fail that way
(strictly: one that starts passing must leave this list).
"""

C1_2 = ("1", "a bare member name after the closed object (`} key:`) reads as prose, dropped")
C6X_1 = (
    "6+",
    "a closer of an outer container where an inner one is missing, with members after it: "
    "whether it closes the outer one too shows only in what follows (not read both ways yet)",
)
C6X_6 = ("6+", 'a string with its quotes escaped (\\"...\\")')

#: id -> (how it fails, (issue class, why))
KNOWN: dict[str, tuple[str, tuple[str, str]]] = {
    "jr-test_missing_and_mixed_quotes-18": ("accepted", C1_2),
    "jr-test_parse_array_edge_cases-15": ("refused", C6X_1),
    "jr-test_parse_object_edge_cases-31": ("refused", C6X_1),
    "jr-test_repair_json_with_objects-1": ("refused", C6X_1),
    "jsr-should_repair_escaped_string_contents-1": ("refused", C6X_6),
    "jsr-should_repair_escaped_string_contents-3": ("refused", C6X_6),
    "jsr-should_repair_escaped_string_contents-4": ("refused", C6X_6),
}
