"""Engine test cases (``tests/data/engine_cases.json``) streamfix does
differently, each with the reason.

A reason reads ``"<kind>: <class>: <detail>"``. The kind is ``better`` when
the engine's expectation is worse for a client and streamfix keeps its own
behaviour (the detail says why), or ``open`` for a gap still to close (the
class groups the gaps for the fixes). ``tests/test_engine_suites.py``
expects each listed case to fail (strictly: one that starts passing must
leave this list). Nothing here is skipped.
"""

# --- streamfix is better for a client -------------------------------------

_BLANKS = (
    "better: whitespace: the blanks between reasoning or call markup and the answer are"
    " trimmed (the engine keeps them; a client would show a blank first line)"
)
_UNCLOSED_ANSWER = (
    "better: unclosed prompt-opened reasoning: a reply that never closes the reasoning the"
    " prompt opened and ends normally (finish stop) is the answer; the engine hides it all as"
    " reasoning and the client gets an empty reply (cut by the token limit, it is reasoning)"
)
_NO_SCHEMA = (
    "better: values without a schema: an argument the tool does not declare is read as JSON"
    " when it is JSON (77004, true, an object); lmdeploy keeps every such value a string"
)
_TOKENS_NEVER_SHOWN = (
    "better: special tokens: a stray <|tool_call_argument_begin|>/<|tool_call_end|> is removed"
    " from the text; the engine returns its raw text with the tokens"
)
_EXAMPLE = (
    "better: a call followed by prose: a bare call (no wrapper token) with prose after it is"
    " an example, kept as text (the code-line rule of issue 35); the engine lifts it"
)
_EMPTY_THINK = (
    "better: empty think pair: the model's own <think></think> after the prompt opened the"
    " reasoning is dropped; llama.cpp keeps '<think>' as the reasoning text"
)

# --- open gaps, by class ----------------------------------------------------


def _open(cls: str, detail: str) -> str:
    return f"open: {cls}: {detail}"


_PY_LITERALS = "pythonic literals"
_PY_AFTER_TEXT = "pythonic list after text"
_CALL_IN_REASONING = "call ends unclosed reasoning"
_HARMONY = "harmony"
_SWALLOWED = "recognised call swallowed"
_SIBLINGS = "one call of several lost"
_ARG_TYPES = "argument types from the schema"
_ARG_TEXT = "argument text"
_NEW_FORMAT = "format not known"

KNOWN: dict[str, str] = {
    # whitespace only
    "lmdeploy/glm47-reasoning-and-tool": _BLANKS,
    "lmdeploy/qwen3-ref-0": _BLANKS,
    "lmdeploy/qwen3-ref-1": _BLANKS,
    "lmdeploy/qwen3-ref-2": _BLANKS,
    "lmdeploy/qwen3-no-open-tag": _BLANKS,
    "lmdeploy/qwen3-strip-open-tag": _BLANKS,
    "lmdeploy/qwen35-reference": _BLANKS,
    "lmdeploy/qwen35-parallel": _BLANKS,
    "lmdeploy/gpt-oss-full-sequence": _BLANKS,
    "sglang/pythonic-python-start-end": _BLANKS,
    "sglang/pythonic-python-start-end-text-after": (
        "better: whitespace: the blanks on both sides of a lifted call are joined into one"
        " (SGLang keeps both spaces)"
    ),
    "sglang/qwen3-coder-parallel": _BLANKS,
    # other choices streamfix keeps
    "lmdeploy/deepseek-v3-thinking-true": _UNCLOSED_ANSWER,
    "lmdeploy/glm47-effort-high-reasoning": _UNCLOSED_ANSWER,
    "sglang/reasoning-base-forced": _UNCLOSED_ANSWER,
    "sglang/reasoning-r1-no-tags": _UNCLOSED_ANSWER,
    "sglang/reasoning-olmo3-forced-no-tags": _UNCLOSED_ANSWER,
    "lmdeploy/glm47-no-schema-strings": _NO_SCHEMA,
    "lmdeploy/glm47-no-schema-strings-object": _NO_SCHEMA,
    "sglang/kimi-no-section-begin": _TOKENS_NEVER_SHOWN,
    "sglang/pythonic-text-after": _EXAMPLE,
    "sglang/pythonic-two-lists": _EXAMPLE + " (here two lists with ' and ' between)",
    "sglang/llama32-trailing-text": _EXAMPLE + " (a bare Llama JSON call)",
    "llamacpp/qwen3.5-12": _EMPTY_THINK,
    # pythonic literals
    "mlx-lm/qwen3_coder-single-quoted-params": _open(
        _PY_LITERALS,
        "a Python dict/list literal (single quotes, True) as an object/array parameter value"
        " stays a string; mlx-lm reads it with literal_eval",
    ),
    "llamacpp/lfm2-7": _open(
        _PY_LITERALS, "JSON true/null inside a dict argument of a pythonic call: the call is lost"
    ),
    "llamacpp/lfm2-8": _open(
        _PY_LITERALS,
        "a dotted name with a dict holding JSON true (Calendar.create_event): the call is lost",
    ),
    # pythonic list after text
    "sglang/pythonic-complete": _open(
        _PY_AFTER_TEXT,
        "'text: [get_weather(...)]' ending the reply is not lifted (a reply that ends with the"
        " call should be)",
    ),
    "sglang/pythonic-text-before": _open(_PY_AFTER_TEXT, "as sglang/pythonic-complete"),
    "sglang/pythonic-partial": _open(_PY_AFTER_TEXT, "as sglang/pythonic-complete"),
    "sglang/pythonic-partial-nested": _open(_PY_AFTER_TEXT, "as sglang/pythonic-complete"),
    # a call inside or ending unclosed reasoning
    "llamacpp/kimi-k2-thinking-11": _open(
        _CALL_IN_REASONING,
        "Kimi K2 calls inside an unclosed <think>, no section or end markers: a call whose"
        " <|tool_call_end|> is missing before the next <|tool_call_begin|> does not read, so only"
        " the last call is lifted and the first stays in the reasoning",
    ),
    # stray/nested think
    "lmdeploy/qwen3-mixed-chunks": (
        "better: whitespace: <think><think>… splits as the engine does (the doubled open"
        " dropped, the later stray </think> kept as text); the blanks around the reasoning and"
        " the answer are trimmed (lmdeploy keeps them)"
    ),
    # harmony
    "llamacpp/parser-gpt-oss-end-token": _open(
        _HARMONY,
        "analysis not closed by <|end|> before <|start|>assistant<|channel|>final: the answer"
        " is read as reasoning",
    ),
    "llamacpp/parser-gpt-oss-no-end": _open(_HARMONY, "as llamacpp/parser-gpt-oss-end-token"),
    "llamacpp/parser-gpt-oss-no-end-2": _open(_HARMONY, "as llamacpp/parser-gpt-oss-end-token"),
    "llamacpp/gpt-oss-4": _open(
        _HARMONY,
        "' to=functions.X<|channel|>analysis<|message|>{…}' (recipient in the role header, the"
        " prompt gave <|start|>assistant): the arguments are read as reasoning, no call",
    ),
    "llamacpp/gpt-oss-10": _open(
        _HARMONY, "a message to the built-in container.exec recipient reaches the content"
    ),
    "llamacpp/gpt-oss-11": _open(
        _HARMONY, "a message to the built-in python recipient reaches the content"
    ),
    "llamacpp/gpt-oss-12": _open(
        _HARMONY, "'<|channel|>commentary to=assistant' before the analysis: the answer is lost"
    ),
    "llamacpp/gpt-oss-13": _open(
        _HARMONY, "'commentary to=assistant' before the final channel: header words leak"
    ),
    **{
        f"llamacpp/llm-jp-4.1-{n}": _open(
            _HARMONY,
            "LLM-jp 4.1's dialect (a space after each special token): nothing is split, header"
            " words reach the content",
        )
        for n in (1, 2, 3, 4, 5)
    },
    # calls swallowed / lost
    "sglang/glm45-array-escaped-json": _open(
        _SWALLOWED,
        "GLM call with a literal '\\n' after the name and backslash-escaped JSON in <arg_value>:"
        " the call is removed and the reply is empty",
    ),
    "mlx-lm/glm47-multiply-2": _open(
        _SWALLOWED, "'<tool_call>multiply a=1 b=2</tool_call>' (key=value arguments): no call"
    ),
    "sglang/llama32-python-tag-separated": _open(
        _SIBLINGS,
        "two Llama calls each after <|python_tag|>: the second is left as text, its token cut"
        " to 'python_tag|>'",
    ),
    # argument types and text
    "sglang/qwen3-coder-type-conversion": _open(
        _ARG_TYPES, "schema type 'float' (not JSON Schema) is not read as a number"
    ),
    "mlx-lm/glm47-temperature-1": _open(
        _ARG_TYPES,
        "<arg_value>\"London\"</arg_value> for a 'str' parameter keeps the JSON quotes",
    ),
    "llamacpp/qwen3-coder-19": _open(
        _ARG_TYPES, "type ['string', 'object']: a JSON object value stays a string"
    ),
    "llamacpp/qwen3-coder-20": _open(_ARG_TYPES, "type ['string', 'integer']: 42 stays a string"),
    "llamacpp/ling3-17": _open(
        _ARG_TYPES, "type ['string', 'object'] / ['string', 'integer']: values stay strings"
    ),
    "sglang/qwen3-coder-indented-xml": _open(
        _ARG_TEXT,
        "indented <parameter=…> values keep their indentation and newlines ('        Dallas\\n"
        "        ')",
    ),
    "sglang/qwen3-coder-indented-two-calls-text-between": _open(
        _ARG_TEXT, "as sglang/qwen3-coder-indented-xml"
    ),
    "llamacpp/seed-oss-6": _open(
        _ARG_TEXT,
        "Seed-OSS value with no newline after <parameter=…>: its own final newline is stripped",
    ),
    # formats not known
    "llamacpp/functionary-v3.2-1": _open(
        _NEW_FORMAT, "Functionary v3.2 recipient format ('all\\n' + answer)"
    ),
    "llamacpp/functionary-v3.2-2": _open(
        _NEW_FORMAT, "Functionary v3.2 recipient format ('NAME\\n{json}')"
    ),
    **{
        f"llamacpp/muse-glimmer-{n}": _open(
            _NEW_FORMAT, "Muse Glimmer (' to=RECIPIENT<|message|>', <atem:function_calls>)"
        )
        for n in (1, 2, 3, 4, 5)
    },
    **{
        f"llamacpp/minicpm5-{n}": _open(
            _NEW_FORMAT,
            "MiniCPM5 <function name=…><param name=…>: no call, '</function>' removed and the"
            " rest left as text",
        )
        for n in (2, 3, 4, 5, 6)
    },
    # --- SGLang's newer per-detector suites
    "sglang/gptoss-text-then-call": _BLANKS,
    "sglang/mistral2-compact-text-before": _BLANKS,
    "sglang/cohere4-parallel-leading-text": _BLANKS,
    "sglang/cohere4-text-then-block": _BLANKS,
    "sglang/reasoning2-qwen3-preserves-whitespace": _BLANKS,
    "sglang/reasoning-granite42-nested-nl-in-reasoning": _BLANKS,
    "sglang/minimax-m2-leading-text": _BLANKS,
    "sglang/minimax-m2-unclosed-block": (
        "better: unclosed call at the end: a MiniMax call whose closing tags never came, at the"
        " end of the reply, is lifted (its arguments are whole); SGLang leaves the raw markup in"
        " the content"
    ),
    "sglang/pythonic2-leading-text": _open(_PY_AFTER_TEXT, "as sglang/pythonic-complete"),
    "sglang/pythonic2-text-then-call": _open(_PY_AFTER_TEXT, "as sglang/pythonic-complete"),
    "sglang/pythonic2-dict-arg": _open(
        _PY_LITERALS, "a Python dict literal as the value of a string parameter: no call, all text"
    ),
    "sglang/pythonic2-list-arg": _open(
        _PY_LITERALS, "a Python list literal as the value of a string parameter: no call, all text"
    ),
    "sglang/hunyuan-hy4-opensource-tags": _open(
        _NEW_FORMAT, "Hunyuan 4's '<tool_calls:opensource>…<arg_key:opensource>' tags: no call"
    ),
    "sglang/reasoning2-gpt-oss-analysis-final": _open(
        _HARMONY,
        "'<|end|><|channel|>final' with no <|start|>assistant between: 'final' leaks into content",
    ),
    "sglang/malformed-qwen25-sibling": _open(
        _SIBLINGS,
        "a JSON array in one <tool_call> with a non-object entry beside a good call: no call"
        " at all (SGLang keeps the good one)",
    ),
}
