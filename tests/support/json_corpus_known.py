"""Corpus cases (tests/data/json_repair_corpus.json) streamfix gets wrong today,
each with how (``accepted``: a guess sent as valid; ``refused``: a certain
reply flagged invalid; ``wrong``: another value sent as valid) and the class
of issue 36 it belongs to (1-6; ``6+``: a certain repair the issue does not
name), with why.

``tests/test_json_corpus.py`` expects each of these to fail that way
(strictly: one that starts passing must leave this list).
"""

C1_1 = ("1", "JSON after the first value is dropped without a word")
C2_1 = ("2", "a member with no value is dropped (the key and its colon vanish)")
C2_2 = ("2", "a line comment swallows the closing brackets; the members after it are dropped")
C3_1 = ("3", "an unterminated string in a reply that stopped is closed silently")
C4_1 = ("4", "a URL in a string: the inner quote ends the string, the rest reads as a comment")
C4_2 = ("4", "an unescaped inner quote that cannot end the string ends it")
C5_1 = (
    "5",
    "a later start is tried after a value that failed to read; what it finds is sent as the answer",
)
C6X_1 = ("6+", "a closer of an outer container where an inner one is missing")
C6X_2 = ("6+", "a leading comma in an array or object")
C6X_3 = ("6+", "Unicode white space (NBSP, zero-width, BOM) between tokens")
C6X_4 = ("6+", "a missing colon between key and value")
C6X_5 = ("6+", "string concatenation with +")
C6X_6 = ("6+", 'a string with its quotes escaped (\\"...\\")')
C6_1 = ("6", "a Python tuple read as an array")
C6_2 = ("6", "digit separators in a number")
C6_3 = ("6", "a number with no digit before or after the point (.25, 1.)")
C6_4 = ("6", "TRUE/FALSE/Null")
C6_5 = ("6", "curly quotes as delimiters")
C6_6 = ("6", "a numeric bare key")
C6_7 = ("6", "JSON serialised twice where the schema wants the object")
C6_8 = ("6", "a closing fence before the closing brackets of a stopped reply")
C6_9 = ("6", "a top-level scalar the schema asks for (held replies look only for { or [)")

#: id -> (how it fails, (issue class, why))
KNOWN: dict[str, tuple[str, tuple[str, str]]] = {
    "ins-test_extract_json_from_codeblock_returns_last_top_level_cand-1": ("accepted", C1_1),
    "ins-test_extract_json_from_stream_returns_last_object-1": ("accepted", C1_1),
    "ins-test_extract_json_from_stream_returns_last_object_in_fenced-1": ("accepted", C1_1),
    "ins-test_stream_extraction_matches_codeblock_last_object-1": ("accepted", C1_1),
    "issue36-1_json_after_the_first_value-1": ("accepted", C1_1),
    "issue36-1_json_after_the_first_value-2": ("accepted", C1_1),
    "issue36-1_json_after_the_first_value-3": ("accepted", C1_1),
    "issue36-1_json_after_the_first_value-4": ("accepted", C1_1),
    "issue36-1_json_after_the_first_value-5": ("accepted", C1_1),
    "jr-test_multiple_jsons-1": ("accepted", C1_1),
    "jr-test_multiple_jsons-6": ("accepted", C1_1),
    "jr-test_parse_object_merge_at_the_end-1": ("accepted", C1_1),
    "jr-test_parse_object_merge_at_the_end-2": ("accepted", C1_1),
    "jr-test_parse_object_merge_at_the_end-3": ("accepted", C1_1),
    "jr-test_parse_object_merge_at_the_end-5": ("accepted", C1_1),
    "jr-test_parse_object_merge_at_the_end-6": ("accepted", C1_1),
    "jr-test_parse_object_merge_at_the_end-7": ("accepted", C1_1),
    "jr-test_parse_object_merge_at_the_end-8": ("accepted", C1_1),
    "jsr-should_repair_a_missing_object_value-3": ("accepted", C2_1),
    "jsr-should_repair_truncated_json-5": ("accepted", C2_1),
    "jsr-should_repair_truncated_json-6": ("accepted", C2_1),
    "jr-test_parse_comment-2": ("accepted", C2_2),
    "issue36-3_open_string_in_a_stopped_reply-1": ("accepted", C3_1),
    "issue36-3_open_string_in_a_stopped_reply-2": ("accepted", C3_1),
    "issue36-3_open_string_in_a_stopped_reply-3": ("accepted", C3_1),
    "jr-test_missing_and_mixed_quotes-2": ("accepted", C3_1),
    "jr-test_missing_and_mixed_quotes-7": ("accepted", C3_1),
    "jr-test_parse_array_edge_cases-11": ("accepted", C3_1),
    "jr-test_parse_array_edge_cases-13": ("accepted", C3_1),
    "jr-test_parse_array_edge_cases-2": ("accepted", C3_1),
    "jr-test_parse_array_edge_cases-23": ("accepted", C3_1),
    "jr-test_parse_object-4": ("accepted", C3_1),
    "jr-test_parse_object_edge_cases-14": ("accepted", C3_1),
    "jr-test_parse_object_edge_cases-21": ("accepted", C3_1),
    "jr-test_parse_object_edge_cases-24": ("accepted", C3_1),
    "jr-test_prefixed_invalid_json_falls_back_to_repair_parser-1": ("accepted", C3_1),
    "jsr-should_add_missing_end_quote-10": ("accepted", C3_1),
    "jsr-should_add_missing_end_quote-2": ("accepted", C3_1),
    "jsr-should_add_missing_end_quote-3": ("accepted", C3_1),
    "jsr-should_add_missing_end_quote-4": ("accepted", C3_1),
    "jsr-should_add_missing_end_quote-6": ("accepted", C3_1),
    "jsr-should_add_missing_end_quote-9": ("accepted", C3_1),
    "jsr-should_concatenate_strings-4": ("accepted", C3_1),
    "jsr-should_repair_an_url_with_missing_end_quote-1": ("accepted", C3_1),
    "jsr-should_repair_an_url_with_missing_end_quote-2": ("accepted", C3_1),
    "jsr-should_repair_truncated_json-1": ("accepted", C3_1),
    "jsr-should_repair_truncated_json-11": ("accepted", C3_1),
    "jsr-should_repair_truncated_json-14": ("accepted", C3_1),
    "jsr-should_repair_truncated_json-15": ("accepted", C3_1),
    "jsr-should_repair_truncated_json-16": ("accepted", C3_1),
    "jsr-should_stop_at_the_first_next_return_when_missing_an_end_quo-2": ("accepted", C3_1),
    "jsr-should_stop_at_the_first_next_return_when_missing_an_end_quo-3": ("accepted", C3_1),
    "lc-test_parse_partial_json-10": ("accepted", C3_1),
    "lc-test_parse_partial_json-9": ("accepted", C3_1),
    "issue36-4_url_in_a_string-1": ("wrong", C4_1),
    "issue36-4_url_in_a_string-2": ("wrong", C4_1),
    "jr-test_markdown-1": ("wrong", C4_1),
    "jr-test_missing_and_mixed_quotes-17": ("refused", C4_2),
    "jr-test_missing_and_mixed_quotes-19": ("refused", C4_2),
    "jr-test_missing_and_mixed_quotes-20": ("refused", C4_2),
    "jr-test_parse_array_edge_cases-14": ("refused", C4_2),
    "jr-test_parse_array_edge_cases-19": ("refused", C4_2),
    "jr-test_parse_object_edge_cases-11": ("refused", C4_2),
    "jr-test_parse_object_edge_cases-3": ("refused", C4_2),
    "jr-test_repair_json_with_objects-2": ("refused", C4_2),
    "jr-test_repair_json_with_objects-3": ("refused", C4_2),
    "jsr-should_escape_unescaped_double_quotes-2": ("refused", C4_2),
    "jsr-should_escape_unescaped_double_quotes-4": ("refused", C4_2),
    "ins-test_extract_json_from_stream_discards_non_json_brace_span_b-1": ("accepted", C5_1),
    "issue36-5_inner_fragment-1": ("accepted", C5_1),
    "jr-test_parse_array_edge_cases-15": ("refused", C6X_1),
    "jr-test_parse_object_edge_cases-1": ("refused", C6X_1),
    "jr-test_parse_object_edge_cases-31": ("refused", C6X_1),
    "jr-test_repair_json_with_objects-1": ("refused", C6X_1),
    "jsr-should_add_a_missing_closing_brace_for_an_object-5": ("refused", C6X_1),
    "jsr-should_add_a_missing_closing_brace_for_an_object-6": ("refused", C6X_1),
    "jsr-should_add_a_missing_closing_bracket_for_an_array-4": ("refused", C6X_1),
    "jsr-should_add_a_missing_closing_bracket_for_an_array-7": ("refused", C6X_1),
    "jsr-should_strip_a_leading_comma_from_an_array-1": ("refused", C6X_2),
    "jsr-should_strip_a_leading_comma_from_an_array-2": ("refused", C6X_2),
    "jsr-should_strip_a_leading_comma_from_an_object-1": ("refused", C6X_2),
    "jsr-should_strip_a_leading_comma_from_an_object-2": ("refused", C6X_2),
    "jsr-should_replace_special_white_space_characters-1": ("refused", C6X_3),
    "jsr-should_replace_special_white_space_characters-2": ("refused", C6X_3),
    "jsr-should_replace_special_white_space_characters-3": ("refused", C6X_3),
    "jsr-should_replace_special_white_space_characters-4": ("refused", C6X_3),
    "jsr-should_repair_missing_colon_between_object_key_and_value-1": ("refused", C6X_4),
    "jsr-should_repair_missing_colon_between_object_key_and_value-2": ("refused", C6X_4),
    "jsr-should_repair_missing_colon_between_object_key_and_value-3": ("refused", C6X_4),
    "jsr-should_repair_missing_colon_between_object_key_and_value-4": ("refused", C6X_4),
    "jsr-should_repair_missing_colon_between_object_key_and_value-6": ("refused", C6X_4),
    "jsr-should_concatenate_strings-1": ("refused", C6X_5),
    "jsr-should_concatenate_strings-2": ("refused", C6X_5),
    "jsr-should_repair_escaped_string_contents-1": ("refused", C6X_6),
    "jsr-should_repair_escaped_string_contents-3": ("refused", C6X_6),
    "jsr-should_repair_escaped_string_contents-4": ("refused", C6X_6),
    "issue36-6_certain_repairs-1": ("refused", C6_1),
    "issue36-6_certain_repairs-2": ("refused", C6_1),
    "jr-test_parenthesized_tuple_still_parses_when_it_is_the_fenced_-1": ("refused", C6_1),
    "jr-test_parse_array_parenthesized_scalar_keeps_scalar_shape-3": ("refused", C6_1),
    "jr-test_parse_array_parenthesized_scalar_keeps_scalar_shape-4": ("refused", C6_1),
    "jr-test_parse_array_python_tuple_literals-1": ("refused", C6_1),
    "jr-test_parse_array_python_tuple_literals-2": ("refused", C6_1),
    "jr-test_parse_array_python_tuple_literals-3": ("refused", C6_1),
    "jr-test_parse_array_python_tuple_literals-4": ("refused", C6_1),
    "issue36-6_certain_repairs-3": ("refused", C6_2),
    "jr-test_parse_number-1": ("refused", C6_2),
    "jr-test_parse_number-2": ("refused", C6_2),
    "issue36-6_certain_repairs-4": ("refused", C6_3),
    "jr-test_parse_number_edge_cases-12": ("refused", C6_3),
    "jr-test_parse_number_edge_cases-3": ("refused", C6_3),
    "jsr-should_repair_invalid_numbers-1": ("refused", C6_3),
    "jsr-should_repair_invalid_numbers-2": ("refused", C6_3),
    "jsr-should_repair_truncated_json-7": ("refused", C6_3),
    "jsr-should_repair_truncated_json-8": ("refused", C6_3),
    "jsr-should_repair_truncated_numbers-1": ("refused", C6_3),
    "issue36-6_certain_repairs-5": ("refused", C6_4),
    "jr-test_parse_boolean_or_null-4": ("refused", C6_4),
    "issue36-6_certain_repairs-6": ("refused", C6_5),
    "jr-test_missing_and_mixed_quotes-6": ("refused", C6_5),
    "jsr-should_repair_missing_colon_between_object_key_and_value-5": ("refused", C6_5),
    "jsr-should_replace_special_quotes_with_double_quotes-1": ("refused", C6_5),
    "jsr-should_replace_special_quotes_with_double_quotes-2": ("refused", C6_5),
    "issue36-6_certain_repairs-7": ("refused", C6_6),
    "jr-test_missing_and_mixed_quotes-11": ("refused", C6_6),
    "jsr-should_add_missing_quotes-4": ("refused", C6_6),
    "issue36-6_certain_repairs-8": ("refused", C6_7),
    "issue36-6_certain_repairs-10": ("refused", C6_8),
    "jr-test_parse_object_edge_cases-20": ("refused", C6_8),
    "lc-test_parse_json-13": ("refused", C6_8),
    "issue36-6_certain_repairs-9": ("refused", C6_9),
    "jsr-should_add_remove_escape_characters-1": ("refused", C6_9),
    "jsr-should_add_remove_escape_characters-2": ("refused", C6_9),
    "jsr-should_escape_unescaped_control_characters-1": ("refused", C6_9),
    "jsr-should_escape_unescaped_control_characters-2": ("refused", C6_9),
    "jsr-should_escape_unescaped_double_quotes-1": ("refused", C6_9),
    "jsr-should_escape_unescaped_double_quotes_in_the_middle_of_a_str-1": ("refused", C6_9),
    "jsr-should_escape_unescaped_double_quotes_in_the_middle_of_a_str-2": ("refused", C6_9),
    "jsr-should_not_replace_special_quotes_inside_a_normal_string-1": ("refused", C6_9),
    "jsr-should_not_replace_special_quotes_inside_a_normal_string-2": ("refused", C6_9),
    "jsr-should_replace_non_normalized_left_right_quotes-1": ("refused", C6_9),
    "jsr-should_replace_non_normalized_left_right_quotes-2": ("refused", C6_9),
    "jsr-should_strip_jsonp_notation-3": ("refused", C6_9),
    "jsr-should_strip_trailing_comma_at_the_end-1": ("refused", C6_9),
}
