"""Engine test cases (``tests/data/engine_cases*.json``) streamfix does
differently, each with the reason.

A reason reads ``"<kind>: <class>: <detail>"``. The kind is ``better`` when
the engine's expectation is worse for a client and streamfix keeps its own
behaviour (the detail says why), or ``open`` for a gap still to close (the
class groups the gaps for the fixes). ``tests/test_engine_suites.py``
expects each listed case to fail (strictly: one that starts passing must
leave this list). Nothing here is skipped.
"""

# --- streamfix is better for a client -------------------------------------

_DRAFTED = (
    "better: drafted calls: a call written inside reasoning that the reasoning then goes on"
    " after or closes over is a draft, not run (an agent would execute what the model was"
    " still weighing); only a call that ends unclosed reasoning and the reply is lifted"
)

_BLANKS = (
    "better: whitespace: the blanks between reasoning or call markup and the answer are"
    " trimmed (the engine keeps them; a client would show a blank first line)"
)
_BLANK_BEFORE_CALL = (
    "better: whitespace: the blank between a sentence and the pythonic call list that ends the"
    " reply is layout, trimmed ('…call:' not '…call: '; SGLang keeps it)"
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
_GIVEN_BACK = (
    "better: given back: a call region that is recognised but holds nothing readable goes out"
    " as text (counted given_back.unreadable; the proxy first asks again), never as nothing;"
    " the engine drops it and the client gets an empty reply"
)
_EMPTY_THINK = (
    "better: empty think pair: the model's own <think></think> after the prompt opened the"
    " reasoning is dropped; llama.cpp keeps '<think>' as the reasoning text"
)
_BLANK_AFTER_FIRST_CALL = (
    "better: whitespace: the blanks between a call the reply starts with and the text after"
    " it are layout, trimmed (the engine keeps them; a client would show a blank first line;"
    " vLLM's own LFM2 parser strips them)"
)

_MISSING_BRACE = (
    "better: arguments missing their closing brace are no call (canitoolcall's strict check on"
    " vLLM's own DeepSeek case, deepseek/vllm-v3-malformed-missing-brace, expects none): such a"
    " call is dropped among good siblings (dropped_call.unreadable) or, alone, given back as text"
    " (the proxy first asks again); vLLM's Kimi and Mistral parsers pass the unclosed text on as"
    " the arguments, which no client parses"
)

_UNHELD = (
    "better: streamed as it comes: with no thinking switch and a template that does not open"
    " the reasoning (RWKV-7 without forced thinking, Gemma 4 without enable_thinking), text is"
    " not held for a lone close that may come at the end: holding would delay every such reply"
    " to its end; the lone close is stripped and the text is the answer, whole and streamed"
    " alike (vLLM's own streamed Gemma 4 test gives the same; its whole parse splits)"
)

# --- open gaps, by class ----------------------------------------------------


def _open(cls: str, detail: str) -> str:
    return f"open: {cls}: {detail}"


KNOWN: dict[str, str] = {
    "lmdeploy/llama3-text-after-call": _BLANK_AFTER_FIRST_CALL + " (' Done.')",
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
    "sglang/mistral2-invalid-json": _GIVEN_BACK,
    "sglang/cohere4-malformed-body": _GIVEN_BACK,
    # pythonic literals
    # pythonic list after text
    "sglang/pythonic-complete": _BLANK_BEFORE_CALL,
    "sglang/pythonic-partial": _BLANK_BEFORE_CALL,
    "sglang/pythonic-partial-nested": _BLANK_BEFORE_CALL,
    # a call inside or ending unclosed reasoning
    # stray/nested think
    "lmdeploy/qwen3-mixed-chunks": (
        "better: whitespace: <think><think>… splits as the engine does (the doubled open"
        " dropped, the later stray </think> kept as text); the blanks around the reasoning and"
        " the answer are trimmed (lmdeploy keeps them)"
    ),
    # harmony
    # argument types and text
    "mlx-lm/glm47-temperature-1": (
        "better: a string parameter keeps its text: GLM's template writes a string value raw,"
        " so <arg_value>\"London\"</arg_value> for a 'string' parameter is the text with its"
        " quotes (an exact-phrase query is written so); mlx-lm decodes every value as JSON,"
        " which would strip such quotes (vLLM's GLM parser keeps a string parameter's text)"
    ),
    "sglang/qwen3-coder-indented-two-calls-text-between": (
        "better: whitespace: the text between two indented calls loses the blanks around it"
        " ('Some text in between.'; SGLang keeps the newline and the markup's indentation)"
    ),
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
    "sglang/pythonic2-leading-text": _BLANK_BEFORE_CALL,
    "sglang/pythonic2-text-then-call": _BLANK_BEFORE_CALL,
}

# --- vLLM's tool-parser tests (tests/data/engine_cases_vllm_tools.json) ------
#
# (Kept apart from the dict above so the transcriptions can grow on their own.)

_TEXT_AFTER_KEPT = (
    "better: text after a call: the text the model wrote after the call markup is kept as"
    " content; the engine drops it"
)
_NOT_AN_OBJECT = (
    "better: arguments not an object: a call whose arguments are a bare string (not an"
    " object, nor an object serialized into a string) is given back as text; the engine"
    " lifts it with arguments a client cannot pass as keyword arguments"
)
_NAME_ONLY_CALL = (
    "better: a name-only JSON object: the whole reply '{\"name\": <declared tool>}' is"
    " lifted as a call with no arguments; the engine keeps it as text"
)

_DS_TOKENS_SHOWN = (
    "better: special tokens: DeepSeek's section tokens around nothing readable are removed"
    " from the text given back; the engine returns its raw text with the tokens"
)

KNOWN_VLLM_TOOLS: dict[str, str] = {
    "vllm/mistral-pre-v11-trailing-data": _BLANK_AFTER_FIRST_CALL + " ('\\nextra trailing data')",
    "vllm/glm4-content-before": "better: whitespace: the space between the sentence and the"
    " <tool_call> is layout, trimmed ('… the weather.' not '… the weather. ')",
    "vllm/deepseekv32-content-before": "better: whitespace: the space between the sentence and"
    " the DSML call block is layout, trimmed ('Sure, let me check!' not '… check! ')",
    "vllm/deepseekv31-multiple-tools": _TEXT_AFTER_KEPT,
    "vllm/deepseekv31-unparsable-cut-off": _DS_TOKENS_SHOWN,
    "vllm/deepseekv31-unparsable-no-call-markers": _DS_TOKENS_SHOWN
    + " (here the section holds 'foo<｜tool▁sep｜>{\"x\":1}' without the per-call markers:"
    " the text 'foo{\"x\":1}' goes out, not a call)",
    "vllm/hermes-bare-string-arguments": _NOT_AN_OBJECT,
    "vllm/hermes-string-arguments-braces": _NOT_AN_OBJECT,
    "vllm/hermes-string-arguments-bracket": _NOT_AN_OBJECT,
    "vllm/hermes-string-arguments-tail": _NOT_AN_OBJECT,
    "vllm/llama3-simple": _EXAMPLE + " (a bare Llama JSON call between two sentences)",
    "vllm/llama3-multiple-json-surrounding-text": _EXAMPLE
    + " (bare Llama JSON calls between two sentences)",
    "vllm/llama3-brace-in-trailing-text": _TEXT_AFTER_KEPT,
    "vllm/llama3-json-in-trailing-text": _TEXT_AFTER_KEPT,
    "vllm/kimi-k2-content-after-section": _TEXT_AFTER_KEPT,
    "vllm/mistral-pre-v11-regex-fallback": _TEXT_AFTER_KEPT,
    "vllm/llama3-missing-parameters": _NAME_ONLY_CALL,
    "vllm/mistral-v11-without-args": _GIVEN_BACK
    + " (here '[TOOL_CALLS]toolname_no_args' with no arguments: 'toolname_no_args' is the"
    " text)",
    "vllm/mistral-v11-complex-unclosed": _MISSING_BRACE,
    "vllm/kimi-k2-invalid-json-kept": _MISSING_BRACE,
    "vllm/kimi-k2-truncated": (
        'better: a call cut by the token limit: \'{"city": "Bei\' (the value itself cut) is'
        " not run with a guessed end; the proxy asks again with a larger allowance"
        " (truncated_call); vLLM passes the partial text on as arguments, which no client parses"
    ),
}

KNOWN.update(KNOWN_VLLM_TOOLS)


# --- vLLM's reasoning-parser tests (tests/data/engine_cases_vllm_reasoning.json)
#
# (Kept apart from the dict above so the transcriptions can grow on their own.)

_STRAY_CLOSE = (
    "better: stray reasoning close: a close the reply never opened, after the answer began, is"
    " markup and is removed; the engine leaves it in the answer"
)
_THINK_PAIR = (
    "better: a reasoning pair the model wrote: '<think>…</think>' at the start of a reply is"
    " reasoning whatever the model and the thinking switch say; the engine leaves the pair and"
    " its reasoning in the answer"
)

KNOWN_VLLM_REASONING: dict[str, str] = {
    # an unclosed prompt-opened reasoning in a reply that ended normally is its answer
    **{
        f"vllm/{name}": _UNCLOSED_ANSWER
        for name in (
            "r1-no-end",
            "mistral-no-end",
            "base-no-end",
            "base-malformed",
            "glm47-no-end",
            "seedoss-no-content",
            "seedoss-no-tokens",
            "step3p5-no-end",
            "ernie45-without-think",
            "minimax-m2-no-end",
            "kimi-k2-implicit-start",
            "hy3-no-end",
            "rwkv-no-end",
            "hcx14b-force-no-boundary",
            "kimi-k25-no-end",
            "plamo3-in-progress",
        )
    },
    # blanks around the channels are layout
    **{
        f"vllm/{name}": _BLANKS
        for name in (
            "r1-new-line",
            "mistral-new-line",
            "qwen3-tool-call-no-think-end",
            "qwen3-tool-call-with-think-no-end",
            "qwen3-thinking-disabled-tool-call",
            "granite-delta-everything",
            "hunyuan-multi-token-delta",
            "olmo3-no-reasoning-newline",
            "olmo3-simple-newline",
            "olmo3-multiple-newlines",
            "olmo3-trailing-space",
            "olmo3-only-end-no-reasoning",
            "step3p5-new-line",
            "step3p5-new-line-stream",
            "step3p5-new-line-complex",
            "step3p5-prefix-9",
            "nemotron-delta-everything",
            "deepseek-v4-call-ends-reasoning",
            "gigachat35-forced-open",
            "stop-buffer-desync",
            "kimi-k25-new-line",
            "gemma4-new-line",
            "solar2-multiline",
        )
    },
    "vllm/minimax-m3-non-leading-end-tag": _STRAY_CLOSE,
    "vllm/apertus-think-strings-are-text": _THINK_PAIR + " (Apertus's is <|inner_prefix|>…)",
    "vllm/iquest2-thinking-disabled": _THINK_PAIR,
    "vllm/plamo3-off-think-tags": _THINK_PAIR + " (PLaMo 3's <|plamo:begin_think:plamo|>…)",
    # a call drafted in reasoning is not run
    "vllm/glm45fix-two-calls": _DRAFTED
    + " (GLM: two calls in an unclosed <think> with reasoning between them: the last, which"
    " ends the reply and so the reasoning, is lifted; the first, followed by more reasoning,"
    " is a draft)",
    "vllm/intern-s1-action-in-reasoning": _DRAFTED
    + " (an Intern-S1 <|action_start|> call followed by more reasoning before </think>)",
    **{
        f"vllm/qwen3-recovery-{name}": _DRAFTED
        + " (a <tool_call> written before </think>: the model closed its reasoning and then"
        " answered, or said nothing; vLLM's qwen3 parser promotes it. Promoting it when"
        " nothing follows the close was tried: canitoolcall's strict check"
        " (mistral/llamacpp-ministral3-marker-in-reasoning) and llama.cpp's own tests"
        " (ministral3-reasoning-5, lfm2.5-thinking-3) require it to stay reasoning)"
        for name in ("call-before-close", "text-after-close", "trailing-text")
    },
    # open
    "vllm/rwkv-unforced-close": _UNHELD,
    "vllm/gemma4-unopened-simple": _UNHELD,
    "vllm/gemma4-unopened-complete": _UNHELD,
    "vllm/kimi-k2-tool-section-ends-reasoning": (
        "better: special tokens: 'some reasoning<|tool_calls_section_begin|>tool call data': the"
        " call section ends the reasoning the prompt opened, as vLLM splits it; nothing in the"
        " section reads, so it goes out as text (given back) without its token (raw call markup"
        " never reaches a user); vLLM hands the section to its tool parser with the token"
    ),
    # The turn ends at PLaMo 3's end-of-turn token (transforms/turn_end.py);
    # before it, the prompt-opened reasoning never closed and the turn ended
    # normally: it is the answer.
    "vllm/plamo3-eot-in-reasoning": _UNCLOSED_ANSWER,
    "vllm/plamo3-off-prefix-suffix": (
        "better: special tokens: thinking off, a PLaMo 3 reasoning pair after text: its tokens"
        " are stripped and its text kept in the answer, as vLLM keeps it; vLLM also returns the"
        " raw <|plamo:begin_think:plamo|> tokens to the client"
    ),
}

KNOWN.update(KNOWN_VLLM_REASONING)


# --- vLLM tool parsers, batch B (tests/data/engine_cases_vllm_tools_b.json) ---
#
# Hunyuan A13B, Granite 3 / 4 / 20B FC, Jamba, xLAM, Olmo 3, InternLM2,
# Phi-4 mini, LFM2, Qwen3 XML, Apertus, Cohere Command.

_B_LAYOUT_BEFORE_CALL = (
    "better: whitespace: the blank between a sentence and the call markup after it is layout,"
    " trimmed"
)
_B_TEXT_AFTER_KEPT = (
    "better: text after a call: the text the model wrote after the call markup is kept as"
    " content (the blanks between the call and it dropped when the call starts the reply); the"
    " engine drops it"
)
_B_TEXT_AROUND_KEPT = (
    "better: text around a call: the sentences before and after the call markup are kept as"
    " content; the engine drops them (content None)"
)

KNOWN_VLLM_TOOLS_B: dict[str, str] = {
    "vllm/hunyuan-content-before": _B_LAYOUT_BEFORE_CALL
    + " ('I will call the tool now.' not '… now. ')",
    "vllm/hunyuan-content-after": _B_TEXT_AFTER_KEPT + " (content 'Thank you!')",
    "vllm/granite-not-an-array": (
        'better: a lone object after <|tool_call|>: \'<|tool_call|> {"name": "func", …}\' (no'
        " list around the call) is lifted, the token says it is a call; vLLM's Granite parser"
        " reads only a list and returns the raw text"
    ),
    "vllm/granite4-complex": (
        "better: whitespace: the blanks on both sides of each lifted call are joined into one"
        " space ('…call: Now the stock…'); vLLM keeps both (' \\n Now …')"
    ),
    "vllm/granite20b-surrounding-text": _B_LAYOUT_BEFORE_CALL
    + " ('Let me check the weather for you.' not '… you.\\n')",
    "vllm/xlam-think-tag": (
        "better: reasoning: '<think>…</think>' before the call list is reasoning, moved to"
        " reasoning_content; vLLM's xLAM parser leaves the tags and the thought in the content"
    ),
    "vllm/internlm-surrounding-text": _B_LAYOUT_BEFORE_CALL
    + " ('Let me check the weather for you.' not '… you. ')",
    "vllm/phi4mini-surrounding-text": _B_TEXT_AROUND_KEPT,
}

KNOWN.update(KNOWN_VLLM_TOOLS_B)


# --- vLLM tool parsers, batch A (tests/data/engine_cases_vllm_tools_a.json) -
#
# Harmony, Seed-OSS, Step3, Step-3.5, MiniMax M1/M2, GLM-4.7, GigaChat 3,
# LongCat.

_REASONING_ENDS = (
    "better: whitespace: the newlines just inside the <seed:think> tags are trimmed from the"
    " reasoning (the engine keeps them)"
)

KNOWN_VLLM_TOOLS_A: dict[str, str] = {
    "vllm/seed-oss-call-unlimited-budget": _REASONING_ENDS,
    "vllm/seed-oss-stream-0-budget": _REASONING_ENDS,
    "vllm/minimax-m2-content-before-call": _BLANKS + " ('Let me check.' not 'Let me check. ')",
    "vllm/minimax-m1-call-in-thinking": _BLANKS + " (the '\\n\\n' after </think>)",
    "vllm/minimax-m2-multiple-params": _NO_SCHEMA.replace("lmdeploy", "vLLM's MiniMax M2 parser")
    + " (here days=5)",
    "vllm/minimax-m1-multiline-json": (
        "better: a call written over several lines: the MiniMax M1 <tool_calls> block holding one"
        " JSON object spread over lines is lifted; vLLM reads one object per line, finds none and"
        " returns an empty reply (no call, no content)"
    ),
    "vllm/gptoss-multiple-tools": (
        "better: arguments not JSON: a Harmony message to a function whose body is not JSON"
        " ('foo') is not lifted (a client cannot parse such arguments) and goes out as its body"
        " ('foo', the header being markup); vLLM lifts it with 'foo' as the arguments"
    ),
}

KNOWN.update(KNOWN_VLLM_TOOLS_A)


# --- Ollama tools (tests/data/engine_cases_ollama_tools.json) ---------------
#
# Ollama's template-driven generic parser (tools/tools_test.go): Hermes
# <tool_call>, Mistral [TOOL_CALLS], DeepSeek tokens, bare JSON and lists.

_OLLAMA_THINK_ALONE = (
    _THINK_PAIR + " (Ollama's test runs its tool parser alone: in its server a thinking parser"
    " splits the pair off first, as streamfix does)"
)

KNOWN_OLLAMA_TOOLS: dict[str, str] = {
    **{
        f"ollama/tools/{name}": _B_LAYOUT_BEFORE_CALL + " (the space before the first <tool_call>)"
        for name in (
            "text-before-call",
            "two-calls",
            "empty-args-then-args",
            "empty-then-args-unclosed",
        )
    },
    "ollama/tools/deepseek": _OLLAMA_THINK_ALONE,
    "ollama/tools/deepseek-incremental": _OLLAMA_THINK_ALONE,
    "ollama/tools/list-invalid": (
        "better: text not held back: a JSON list naming a tool not offered, whose ']' never"
        " came, goes out as the text it is when the reply ends; Ollama's test stops while its"
        " parser still holds it (its server gives the held text back only at the end)"
    ),
    "ollama/tools/fa-long-string": (
        "better: repetition: a 500-character value repeating 'a{b}c' 100 times is a degenerate"
        " loop, cut there (finish length), and the call it cut is not run (the proxy asks"
        " again); Ollama's argument finder reads the whole value"
    ),
    "ollama/tools/fa-name-keyed": _open(
        "name-keyed object",
        "'{\"get_temperature\": {…}}' (the offered tool's name as the only key, its arguments"
        " the value) is no call shape streamfix reads; Ollama's argument finder lifts it",
    ),
    "ollama/tools/fa-name-keyed-stringified": _open(
        "name-keyed object",
        '\'{"get_temperature": "{…}"}\' (the offered tool\'s name as the only key, its arguments'
        " a JSON string) is no call shape streamfix reads; Ollama's argument finder lifts it",
    ),
}

KNOWN.update(KNOWN_OLLAMA_TOOLS)


# --- Ollama misc (tests/data/engine_cases_ollama_misc.json) ---------------
#
# Harmony (harmony/harmonyparser_test.go), Ministral 3, Olmo 3 (Instruct and
# Think), Laguna (model/parsers/*_test.go).

_O_BLANK_AFTER_WORD = (
    "open: whitespace: the blanks between a word and a [TOOL_CALLS] that follows it stay in"
    " the content (only blanks after a sentence's end or an introduction are held as layout"
    " before a call: holding every blank after a word would cost a rebuilt chunk each,"
    " transforms/detect.py); Ollama's Ministral parser trims them"
)
_O_THINK_AFTER_TEXT = (
    "open: reasoning after text: a [THINK]…[/THINK] section after the answer began stays in"
    " the content as written (only a section at the reply's start is reasoning); Ollama's"
    " Ministral parser moves it to thinking and glues the text around it"
)
_O_THINK_OFF_KEPT = (
    "better: reasoning kept apart: with thinking off (Laguna's default), the <think>…</think>"
    " block the model still wrote goes to reasoning_content, the answer alone to content;"
    " Ollama's Laguna parser discards the block"
)
_O_TRAILING_BLANKS = (
    "open: whitespace: the newline(s) that end the answer are the model's text, passed on as"
    " written (no markup follows them); Ollama's Laguna parser trims the reply's end"
)

KNOWN_OLLAMA_MISC: dict[str, str] = {
    "ollama/harmonyparser/streaming-implicit-unknown-channel": (
        "open: harmony header: '<|channel|>thinking<|message|>' names no Harmony channel; its"
        " tokens are stripped and the word 'thinking' is left glued to the text"
        " ('thinkingProcessing request'); Ollama's handler drops the header"
    ),
    "ollama/harmonyparser/header-extra-token-after-recipient": (
        "open: harmony header: a word after the recipient ('to=functions.get_weather"
        " abc<|channel|>analysis') is not read as the call's header: the analysis channel after"
        " it opens reasoning and the call is lost; Ollama's parser ignores the extra word"
    ),
    "ollama/ministral/content-before-call": _O_BLANK_AFTER_WORD + " ('hello ' not 'hello')",
    "ollama/ministral/blanks-before-call": _O_BLANK_AFTER_WORD + " ('content \\n ')",
    "ollama/ministral/tabs-before-call": _O_BLANK_AFTER_WORD + " ('content\\t\\n\\t')",
    "ollama/ministral/nbsp-before-call": _O_BLANK_AFTER_WORD + " ('content\\xa0')",
    "ollama/ministral/blanks-before-think": _O_THINK_AFTER_TEXT + " ('contentafter')",
    "ollama/ministral/content-then-think": _O_THINK_AFTER_TEXT + " ('contentmore')",
    "ollama/ministral/think-close-fakeout": _UNCLOSED_ANSWER,
    "ollama/olmo3-think/thinking-whitespace": (
        "better: whitespace: the blanks at both ends of the reasoning are layout, trimmed"
        " ('Some thinking'); Ollama's Olmo 3 Think parser trims only its end ('  Some thinking')"
    ),
    "ollama/laguna/name-alias": (
        "open: tool aliases: a call to read_file when only read is offered is a call to a tool"
        " not offered, stripped (stripped.unoffered_call); Ollama's Laguna parser maps"
        " read_file/write_file/edit_file/web_fetch to an offered read/write/edit/webfetch"
    ),
    "ollama/laguna/duplicated-nested-call": (
        "open: call opened twice: a call opened again before its close ('<tool_call>skill\\n{…}"
        "\\n<tool_call>skill\\n{…}</tool_call>', the same call twice) does not read and goes"
        " out as text; Ollama's Laguna parser keeps the first and drops the repeat"
    ),
    "ollama/laguna/think-off-block": _O_THINK_OFF_KEPT,
    "ollama/laguna/think-off-block-then-call": _O_THINK_OFF_KEPT,
    "ollama/laguna/think-false-block": _O_THINK_OFF_KEPT,
    "ollama/laguna/think-false-lone-close": _O_TRAILING_BLANKS + " ('Tokyo\\n')",
    "ollama/laguna/think-true-lone-close": _O_TRAILING_BLANKS + " ('Tokyo\\n')",
    "ollama/laguna/think-default-lone-close": _O_TRAILING_BLANKS + " ('Tokyo\\n')",
    "ollama/laguna/think-false-trailing-blanks": _O_TRAILING_BLANKS + " ('Hello there.\\n\\n')",
    "ollama/laguna/think-true-untagged": _UNCLOSED_ANSWER,
    "ollama/laguna/think-true-after-user": _UNCLOSED_ANSWER,
}

KNOWN.update(KNOWN_OLLAMA_MISC)


# --- Ollama qwen (tests/data/engine_cases_ollama_qwen.json) -----------------
#
# Ollama's Qwen3, Qwen3-Coder, Qwen3.5 and Qwen3-VL parsers.

_OLLAMA_DOUBLED_OPEN = (
    "better: doubled open: the model's own <think> at the start of the reasoning the prompt"
    " opened is markup, dropped (Ollama's own Qwen3.5 parser strips one such tag); Ollama's"
    " Qwen3-VL parser keeps '<think>' in the reasoning text"
)
_OLLAMA_NULL = (
    "better: values: the word null is null only for a parameter whose schema admits null"
    " (toolargs.convert_value); else the model's text is passed on as written (a string"
    " parameter keeps its text; for another type the client's validation sees what the model"
    " wrote); Ollama's Qwen3-Coder parser turns any null, NULL into null, which the schema"
    " does not allow either"
)
_OLLAMA_NESTED_OPEN = _open(
    "nested open in prompt-opened reasoning",
    "with no thinking switch, a reply to a model whose template opens the reasoning"
    " (qwen3-vl:8b-thinking) that writes text, then its own <think>, then </think> within the"
    " hold is read as answer text, tags and all, as for a DeepSeek-R1 request"
    " (tests/test_reasoning.py expects 'Hi <think>aside</think> there' to stay text); with"
    " the switch on it splits as Ollama does (all before the first close is reasoning).",
)

KNOWN_OLLAMA_QWEN: dict[str, str] = {
    # names: a quoted name is the name without its quotes
    **{
        f"ollama/{stem}/{name}": (
            "better: names: a call's name written in quotes (<function=\"get current"
            ' temperature">, or quotes inside the JSON string) is the name without them, and'
            " so the tool the client declared (a tool name cannot hold quotes); Ollama returns"
            " the quotes in the name, which names no tool"
        )
        for stem, name in (
            ("qwen3coder_test", "names-with-quotes"),
            ("qwen3vl_nonthinking_test", "json-names-with-quotes"),
            ("qwen3vl_thinking_test", "json-names-with-quotes"),
        )
    },
    "ollama/qwen3coder_test/value-null-value-lowercase": _OLLAMA_NULL + " (a 'string' parameter)",
    "ollama/qwen3coder_test/value-null-value-case-insensitive": _OLLAMA_NULL
    + " (NULL for an 'integer' parameter)",
    "ollama/qwen3coder_test/value-invalid-boolean-falls-back-to-false": (
        "better: values: 'yes' for a 'boolean' parameter is no boolean and is passed on as"
        " written; Ollama's Qwen3-Coder parser makes any such text false, which may invert"
        " what the model meant"
    ),
    # Qwen3-VL instruct (no reasoning): think tags in its reply
    "ollama/qwen3vl_nonthinking_test/simple-thinking": _STRAY_CLOSE,
    "ollama/qwen3vl_nonthinking_test/thinking-with-split-tags": _STRAY_CLOSE,
    "ollama/qwen3vl_nonthinking_test/simple-trip-thinking": _THINK_PAIR,
    "ollama/qwen3vl_nonthinking_test/interleaved-thinking": _THINK_PAIR
    + " (the later </think>, after the answer began, stays text as the engine keeps it)",
    # Qwen3-VL thinking (the prompt opened <think>)
    "ollama/qwen3vl_thinking_test/simple-trip-thinking": _OLLAMA_DOUBLED_OPEN,
    "ollama/qwen3vl_thinking_test/interleaved-thinking": _OLLAMA_DOUBLED_OPEN,
    "ollama/qwen3vl_thinking_test/partial-thinking-tag-fakeout": _UNCLOSED_ANSWER
    + " (the test stops feeding there without ending the stream; here the reply ends)",
    "ollama/qwen3vl_thinking_test/multiple-think-tags": _OLLAMA_NESTED_OPEN,
    "ollama/qwen3vl_thinking_test/nested-thinking-outside-thinking-inside-thinking": (
        _OLLAMA_NESTED_OPEN
    ),
    "ollama/qwen3vl_thinking_test/test-with-split-thinking-and-content": _OLLAMA_NESTED_OPEN,
}

KNOWN.update(KNOWN_OLLAMA_QWEN)


# --- Ollama glm (tests/data/engine_cases_ollama_glm.json) -------------------
#
# Ollama's GLM-4.6 / 4.7, DeepSeek-V3.1, Cohere North, Cogito and Nemotron 3
# Nano parser tests.

KNOWN_OLLAMA_GLM: dict[str, str] = {
    **{
        f"ollama/glm46/{name}": _GIVEN_BACK
        + " (here a GLM call the reply ends inside, before a name, a value or a required"
        " argument is whole;"
        " Ollama's parser returns an error at the end, so the request fails)"
        for name in ("done-partial-name", "done-cut-value", "done-missing-required")
    },
    "ollama/cohere/garbage-action": _GIVEN_BACK + " (here '[!!!]' in a Cohere action block)",
    **{
        f"ollama/deepseek3/{name}": _GIVEN_BACK
        + " (here a DeepSeek call without its separator or with arguments that are not JSON:"
        " its text goes out without the tokens)"
        for name in ("missing-sep", "invalid-json")
    },
    "ollama/deepseek3/partial-close-on": _UNCLOSED_ANSWER
    + " (here 'Thinking content</th': Ollama also drops the partial close)",
    "ollama/deepseek3/two-sections": _TEXT_AFTER_KEPT
    + " ('Second.' between two DeepSeek call sections; Ollama's parser reads on from the first"
    " section into the second and skips it)",
    "ollama/cogito/tool-outputs": (
        "better: text kept: the text the model wrote inside DeepSeek's tool-output tokens stays"
        " as content, the tokens removed, as Ollama's own DeepSeek-V3.1 parser keeps it; Ollama's"
        " Cogito parser drops it and the client gets an empty reply"
    ),
    "ollama/cogito/split-section-token": (
        "better: a marker cut between chunks: a call whose section token was cut between two"
        " chunks is lifted (streamfix holds a marker's start); Ollama's Cogito parser keeps it all"
        " as text, raw call markup shown to the user"
    ),
    "ollama/glm46/blank-before-call-trimmed": _open(
        "whitespace",
        "the blanks between a word and a call ('content\\n  \\t  <tool_call>…') go out at once"
        " (only blanks after a sentence's end are held as layout, detect._layout_after: holding"
        " every blank after a word would cost a rebuilt chunk each); Ollama trims them",
    ),
}

KNOWN.update(KNOWN_OLLAMA_GLM)


# --- Ollama gemma (tests/data/engine_cases_ollama_gemma.json) ---------------
#
# Ollama's Gemma 4, FunctionGemma, LFM2 and Muse Glimmer parser tests.

_KEPT_APART = (
    "better: reasoning kept apart: with thinking switched off, the reasoning the model wrote"
    " anyway goes to reasoning_content (the answer is the same; a client that asked for none"
    " ignores the field); Ollama drops its text"
)
_PY_ESCAPES = (
    "better: python string escapes: a pythonic call's string is a Python literal, so its"
    " escapes are decoded as Python (and vLLM's and SGLang's parsers, through ast) read them;"
    " Ollama's LFM2 parser keeps the backslashes as written"
)

KNOWN_OLLAMA_GEMMA: dict[str, str] = {
    "ollama/gemma4/thinking-disabled-channel": _KEPT_APART,
    "ollama/glimmer/thinking-off": _KEPT_APART + " (a to=self message)",
    "ollama/lfm2/escaped-quote": _PY_ESCAPES + " (\\' is ')",
    "ollama/lfm2/newline-escape": _PY_ESCAPES + " (\\n is a newline)",
    "ollama/glimmer/undeclared-recipient": (
        "better: unoffered call: a message to a tool the request did not offer, holding a call"
        " block, is call markup: stripped and counted (stripped.unoffered_call), never shown to"
        " the user as raw XML; Ollama returns the block as the content"
    ),
    **{
        f"ollama/gemma4/{name}": _open(
            "unclosed string",
            "a Gemma 4 string whose closing <|\"|> never came ('command:<|\"|>ls}'): Ollama"
            " closes it before the final '}' (issue 15315); the family table"
            " (tests/support/family_cases.py, MARKUP) holds this very shape as no call, so it"
            " is given back as text until the lead decides",
        )
        for name in ("repair-unclosed-string", "repair-unclosed-terminal-string")
    },
    "ollama/glimmer/control-token-text-in-value": _open(
        "answer header in a call",
        "'<|start|>assistant to=user<|message|>' written inside a parameter value is dropped by"
        " the reasoning splitter (an answer header), which runs before the call detector and"
        " does not know it is inside an <atem:function_calls> block",
    ),
    "ollama/glimmer/fumbled-user-recipient": _open(
        "fumbled recipient",
        "a to=user message that is nothing but a well-formed block for an offered tool stays"
        " text (a block in the answer is text, as llama.cpp's tests require); Ollama lifts it"
        " when the block is the whole message",
    ),
    "ollama/glimmer/implicit-boundary": _open(
        "implicit message end",
        "a to=self message not ended by <|eom|> before the next '<|start|>assistant to=TOOL'"
        " header keeps the header and the block in the reasoning; the header should end it",
    ),
}

KNOWN.update(KNOWN_OLLAMA_GEMMA)


# --- Ollama older (tests/data/engine_cases_ollama_older.json) ---------------
#
# Ollama's Apertus 1.5, DeepSeek R1, Granite thinking, MiniMax M2 and
# Command-R parsers, and its large-number tool-call test.

_OO_LAYOUT_AFTER_CALL = (
    "better: whitespace: the blank between a sentence and the call markup after it is layout,"
    " trimmed, and the newline after the block is kept as the break between the two sentences"
    " ('Let me check.\\nDone checking.'); Ollama keeps the blank before the block and trims"
    " the one after ('Let me check. Done checking.')"
)

KNOWN_OLLAMA_OLDER: dict[str, str] = {
    "ollama/apertus15/suppresses-unexpected-thinking": _KEPT_APART,
    "ollama/deepseek/malformed-call-missing-sep": _GIVEN_BACK
    + ' (here \'bad_tool{"arg":"value"}\' with no <｜tool▁sep｜>; the text before it stays)',
    "ollama/deepseek/malformed-call-invalid-json": _GIVEN_BACK
    + " (here 'bad_tool{invalid json}'; the text before it stays)",
    "ollama/deepseek/partial-think-tag-with-thinking": _UNCLOSED_ANSWER
    + " (here 'Thinking content</th': the half tag is the model's text)",
    "ollama/deepseek/consecutive-tool-calls": _TEXT_AFTER_KEPT
    + " ('Second.' between the two call sections; Ollama's parser also loses the second call)",
    "ollama/minimaxm2/param-json-object": (
        "better: a string parameter keeps its text: the value '{\"keywords\": [...]}' of a"
        " parameter the tool declares a string is passed on as that string (the schema's type);"
        " Ollama decodes it into an object the client's validation rejects"
    ),
    "ollama/minimaxm2/param-json-array": (
        'better: a string parameter keeps its text: the value \'["AI", "machine learning"]\''
        " of a parameter the tool declares a string is passed on as that string (the schema's"
        " type); Ollama decodes it into a list the client's validation rejects"
    ),
    "ollama/minimaxm2/content-before-call": _B_LAYOUT_BEFORE_CALL + " ('… the weather.')",
    "ollama/minimaxm2/stream-tool-call-tag-split": _B_LAYOUT_BEFORE_CALL + " ('Let me check.')",
    "ollama/minimaxm2/multiple-call-blocks": _B_LAYOUT_BEFORE_CALL
    + " (the newline between 'Some text.' and the second block)",
    "ollama/minimaxm2/content-before-and-after-call": _OO_LAYOUT_AFTER_CALL,
    "ollama/commandr/content-before-action": _B_LAYOUT_BEFORE_CALL
    + " (the newline before 'Action:')",
    "ollama/minimaxm2/whitespace-in-param": _open(
        "value blanks",
        "a string value written with blanks at both ends ('  San Francisco  ') keeps them"
        " (only one newline each side, the template's layout, is trimmed, as for every XML"
        " family); Ollama's MiniMax M2 parser trims them all. Which is right is the lead's call",
    ),
    "ollama/commandr/directly-answer": _open(
        "directly-answer",
        "Command R+'s built-in 'directly-answer' action (its template's way of answering"
        " without a tool) is a call to a tool not offered in an unwrapped 'Action:' block, so it"
        " goes out as text, fence and all; Ollama's Command-R parser drops it (no call, no"
        " text). Dropping it would leave an empty reply: the right reading needs a decision",
    ),
}

KNOWN.update(KNOWN_OLLAMA_OLDER)


# --- Ollama newfam (tests/data/engine_cases_ollama_newfam.json) -------------
#
# Ollama's Bailing (Ling 3), GLM-5.2, INTELLECT-3, Kolibri 1 and MiniCPM 5
# parser tests.

_O_REASONING_BLANKS = (
    "better: whitespace: the blanks at both ends of the reasoning are layout, trimmed;"
    " Ollama's INTELLECT-3 parser (its generic thinking parser) trims only the start"
)

KNOWN_OLLAMA_NEWFAM: dict[str, str] = {
    "ollama/intellect3/think-blanks": _O_REASONING_BLANKS + " ('Some thoughts  \\n')",
    "ollama/intellect3/blanks-inside-think": _O_REASONING_BLANKS + " ('Thinking  \\n  ')",
    "ollama/intellect3/unclosed-tool-call": (
        "better: unclosed call at the end: a Qwen3-Coder call whose </function> came but whose"
        " </tool_call> never did, at the end of the reply, is lifted (its arguments are whole);"
        " Ollama's parser still waits for the close and returns neither text nor a call, an"
        " empty reply"
    ),
    "ollama/minicpm5/unknown-tool-text": (
        "better: unoffered call: a MiniCPM 5 <function name=…> element naming a tool the request"
        " did not offer is call markup: stripped and counted (stripped.unoffered_call), never"
        " shown to the user as raw XML; Ollama returns the element as the content"
    ),
    "ollama/intellect3/blanks-before-call": _open(
        "whitespace",
        "the blanks between a word and a call ('Text   <tool_call>…') go out at once (only"
        " blanks after a sentence's end are held as layout, detect._layout_after: holding every"
        " blank after a word would cost a rebuilt chunk each); Ollama trims them",
    ),
    "ollama/intellect3/only-blanks": _open(
        "whitespace",
        "a reply of blanks only ('   \\n  \\t  ', no markup anywhere) is passed on as written;"
        " Ollama's Qwen3-Coder parser trims the blanks that begin content and returns nothing",
    ),
}

KNOWN.update(KNOWN_OLLAMA_NEWFAM)


# --- SGLang sg4 (tests/data/engine_cases_sglang_sg4.json) -------------------
#
# SGLang's Qwen 2.5, zero-argument, unknown-tool-name, DeepSeek V4.1 and
# GLM-5.3-Flash detector tests (test/registered/unit/function_call/).

_S4_UNOFFERED_IN_LIST = _open(
    "unoffered call in a bare list",
    "a bare JSON call list (tool_choice=required) that names one tool the request did not"
    " offer is text as a whole (bare JSON is only a candidate: every element must name an"
    " offered tool); SGLang drops the unoffered element and returns the others",
)
_S4_SCHEMA_WRAP = _open(
    "schema guess",
    "GLM-5.3-Flash's detector wraps arguments into the tool's one required array property"
    " when the model wrote the array bare or one item unwrapped; streamfix reads the"
    " arguments as written",
)

KNOWN_SGLANG_SG4: dict[str, str] = {
    "sglang/qwen25/malformed-json": _GIVEN_BACK,
    "sglang/unknown-tool/json-array-unknown-first": _S4_UNOFFERED_IN_LIST,
    "sglang/unknown-tool/json-array-unknown-middle": _S4_UNOFFERED_IN_LIST,
    "sglang/unknown-tool/json-array-unknown-last": _S4_UNOFFERED_IN_LIST,
    "sglang/deepseekv41/round-trip": _open(
        "whitespace",
        "the blank line between a word and the V4.1 calls block ('summary\\n\\n') stays in the"
        " content (only blanks after a sentence's end are held as layout before a call,"
        " transforms/detect.py); SGLang trims it",
    ),
    "sglang/glm53flash/unwrapped-array-item": _S4_SCHEMA_WRAP
    + " (the call goes out with {'content', 'status'}, not {'todos': [...]})",
    "sglang/glm53flash/bare-array-three": _S4_SCHEMA_WRAP
    + " (arguments that are a list are not an object: the call is given back as text)",
    "sglang/glm53flash/bare-array-two": _S4_SCHEMA_WRAP
    + " (arguments that are a list are not an object: the call is given back as text)",
}

KNOWN.update(KNOWN_SGLANG_SG4)


# --- SGLang sg3 (tests/data/engine_cases_sglang_sg3.json) -------------------
#
# SGLang's Spark 2.5 / Spark 3, Poolside v1 (Laguna) and K2-v3 (K2 Horizon)
# detector suites.

_S3_SPARK_VALUES = _open(
    "value typing",
    "Spark's own protocol (SGLang's Spark detectors): 'null' is null for a parameter of any"
    " type, and the value of a key the tool does not declare stays text ('42'); streamfix reads"
    " Spark's calls as GLM's, so a string parameter keeps 'null' as its text and an undeclared"
    " '42' is the number 42 (the format's parse is not told the model, so a Spark-only rule"
    " would need the model's name in the format)",
)
_S3_EMPTY_WRAPPER = (
    "better: empty wrapper: '<tool_call></tool_call>' (no name, nothing inside) is call markup"
    " with nothing to run, stripped from the text ('xy'); SGLang shows the tags to the user"
)
_S3_ORPHAN_KEY = _open(
    "malformed GLM pairs",
    "an <arg_key> with no <arg_value> (before </tool_call> or before the next <arg_key>) makes"
    " the GLM block unreadable, so it is text as written; SGLang's Poolside detector drops the"
    " lone key and runs the call with what is left (here without the required 'location'),"
    " which is no better: the right reading needs a decision",
)
_S3_K2_REASONING = (
    "better: reasoning: K2 Horizon's reasoning block (<ifm|think…>…</ifm|think…>) is moved to"
    " reasoning_content; SGLang's test runs the K2-v3 tool parser alone (no reasoning parser),"
    " which passes the block on in the text, tags and all"
)
_S3_K2_PROMPT_OPENED = (
    "better: reasoning: K2 Horizon's template opens the reasoning in the prompt, so the text"
    " before the first call markup is reasoning ('prefix'), as vLLM's composed K2 Horizon"
    " parsers split the text before a call group; the block after it does not parse and is"
    " shown as written, as SGLang shows it. SGLang's test runs the tool parser alone, which"
    " keeps 'prefix' in the text"
)

KNOWN_SGLANG_SG3: dict[str, str] = {
    "sglang/spark25/null-and-fallbacks": _S3_SPARK_VALUES,
    "sglang/spark3/null-and-fallbacks": _S3_SPARK_VALUES,
    "sglang/spark25/empty-block-is-text": _S3_EMPTY_WRAPPER,
    "sglang/spark3/empty-block-is-text": _S3_EMPTY_WRAPPER,
    "sglang/poolside_v1/leading-text": _B_LAYOUT_BEFORE_CALL
    + " ('Sure, checking now.' not '… now. ')",
    "sglang/poolside_v1/text-before-call": _B_LAYOUT_BEFORE_CALL
    + " ('Let me check.' not '… check. ')",
    "sglang/poolside_v1/key-without-value": _S3_ORPHAN_KEY,
    "sglang/poolside_v1/key-without-value-then-call": _S3_ORPHAN_KEY
    + " (the second, whole call is lifted)",
    "sglang/poolside_v1/orphan-key-then-key": _S3_ORPHAN_KEY,
    "sglang/poolside_v1/no-name-block": _GIVEN_BACK
    + " (a <tool_call> block of pairs with no name; SGLang's Poolside detector drains it)",
    "sglang/k2_v3/reasoning-kept-answer": _S3_K2_REASONING,
    "sglang/k2_v3/reasoning-kept-answer-stream": _S3_K2_REASONING,
    "sglang/k2_v3/reasoning-then-group": _S3_K2_REASONING,
    "sglang/k2_v3/reasoning-then-group-stream": _S3_K2_REASONING,
    "sglang/k2_v3/close-only-then-group": _S3_K2_REASONING
    + " (here only the close: the template opened it)",
    "sglang/k2_v3/key-without-value-text": _S3_K2_PROMPT_OPENED,
    "sglang/k2_v3/key-without-value-group-text": _S3_K2_PROMPT_OPENED,
    "sglang/k2_v3/unterminated-released": _S3_K2_PROMPT_OPENED,
}

KNOWN.update(KNOWN_SGLANG_SG3)


# --- SGLang sg2 (tests/data/engine_cases_sglang_sg2.json) -------------------
#
# SGLang's IQuest Q1, MiMo and Trinity detector tests
# (test/registered/unit/function_call/).

_S_END_TOKEN_SHOWN = (
    "better: special tokens: the end-of-turn token the server did not stop at"
    " (<|iquest_end|>, <|endoftext|>) is removed from the text; SGLang's IQuest Q1 parser"
    " returns it as content"
)
_S_LOST_VALUE_CLOSE = (
    "better: a lost value close: <arg_value>1</iquest_tool_call> is read as glm.py reads GLM's"
    " calls (the value ends at the call's close) and the call is lifted; SGLang's IQuest Q1"
    " parser shows the raw call markup to the user"
)
_S_NULL = (
    "better: values: the word null is null only for a parameter whose schema admits null"
    " (toolargs.convert_value); else the model's text is passed on as written (a string"
    " parameter keeps its text; for another type the client's validation sees what the model"
    " wrote); SGLang's MiMo parser turns any null, NULL, Null into null, which the schema does"
    " not allow either"
)
_S_TYPE_NAMES = _open(
    "type names outside JSON Schema",
    "a parameter typed tuple (no JSON Schema type, no alias in toolargs.TYPE_ALIASES) gets"
    " the model's text as written; SGLang's MiMo parser reads any unknown type through"
    " Python's ast.literal_eval ((1, 2) -> [1, 2])",
)
_S_NAMED_CHOICE = _open(
    "named tool_choice",
    "with tool_choice naming one function, SGLang constrains the reply to that function's bare"
    " arguments object and reads it as the call; streamfix reads no bare arguments object as a"
    " call (it passes the JSON on as content)",
)
_S_THINK_GLUED = (
    "better: reasoning kept apart: Trinity's <think>…</think> goes to reasoning_content and the"
    " answer alone to content; SGLang's Trinity detector only strips the tags and glues the"
    " reasoning to the answer in content"
)

KNOWN_SGLANG_SG2: dict[str, str] = {
    "sglang/iquest_q1/leading-text": _B_LAYOUT_BEFORE_CALL + " ('Running now.')",
    "sglang/iquest_q1/two-calls-streamed": _B_LAYOUT_BEFORE_CALL + " ('Running now.')",
    "sglang/mimo/leading-text": _B_LAYOUT_BEFORE_CALL + " ('Sure, running now.')",
    "sglang/mimo/stream-split-bot-token": _B_LAYOUT_BEFORE_CALL + " ('I will run it.')",
    "sglang/mimo/stream-char-level": _B_LAYOUT_BEFORE_CALL + " ('Let me check.')",
    "sglang/iquest_q1/newline-after": _BLANK_AFTER_FIRST_CALL + " ('after')",
    "sglang/iquest_q1/serving-newline-after": _BLANK_AFTER_FIRST_CALL + " ('after')",
    "sglang/iquest_q1/malformed-then-call": _S_LOST_VALUE_CLOSE + " (content 'after')",
    "sglang/iquest_q1/malformed-between-calls": _S_LOST_VALUE_CLOSE + " (three calls)",
    "sglang/iquest_q1/malformed-alone": _S_LOST_VALUE_CLOSE,
    "sglang/iquest_q1/stop-marker-after-call": _S_END_TOKEN_SHOWN,
    "sglang/iquest_q1/stop-marker-plain": _S_END_TOKEN_SHOWN,
    "sglang/iquest_q1/stop-marker-endoftext": _S_END_TOKEN_SHOWN,
    "sglang/iquest_q1/named-raw-arguments": _S_NAMED_CHOICE,
    "sglang/iquest_q1/serving-named": _S_NAMED_CHOICE,
    "sglang/iquest_q1/length-named": _S_NAMED_CHOICE + " (here '{}' at the token limit)",
    "sglang/mimo/convert-null-lower": _S_NULL + " (a 'string' parameter)",
    "sglang/mimo/convert-null-upper": _S_NULL + " (NULL for an 'integer' parameter)",
    "sglang/mimo/convert-null-title-bool": _S_NULL + " (Null for a 'boolean' parameter)",
    "sglang/mimo/convert-boolean-invalid": (
        "better: values: 'yes' for a 'boolean' parameter is no boolean and is passed on as"
        " written; SGLang's MiMo parser makes any such text false, which may invert what the"
        " model meant"
    ),
    "sglang/mimo/convert-tuple-type": _S_TYPE_NAMES,
    "sglang/mimo/unknown-function": (
        "better: unoffered call: a <tool_call><function=…> block naming a tool the request did"
        " not offer is call markup: stripped and counted (stripped.unoffered_call), never shown"
        " to the user as raw XML; SGLang's MiMo parser returns the block as the content"
    ),
    "sglang/mimo/no-function-tag": _GIVEN_BACK
    + " (here '<tool_call>no function here</tool_call>')",
    "sglang/trinity/think-tags-stripped": _S_THINK_GLUED,
    "sglang/trinity/think-char-by-char": _S_THINK_GLUED,
    "sglang/trinity/call-inside-think": _DRAFTED
    + " (a Hermes <tool_call> that fills the whole <think> section, nothing after the close;"
    " SGLang's Trinity detector strips the think tags and lifts it. Promoting such a call was"
    " tried for vllm/qwen3-recovery-call-before-close and refused by canitoolcall's strict"
    " check and llama.cpp's own tests)",
}

KNOWN.update(KNOWN_SGLANG_SG2)


# --- SGLang sg1
KNOWN_SGLANG_SG1: dict[str, str] = {
    "sglang/dots/streaming-unknown-tool-surfaced": (
        "better: unoffered call: a <dots_function_call> block invoking a tool the request did not"
        " offer is call markup: stripped and counted (stripped.unoffered_call), never shown to the"
        " user as raw XML; SGLang's streaming path returns the block's <invoke> element as content"
    ),
    "sglang/dots/streaming-malformed-then-valid": _open(
        "wrapper around prose",
        "a <dots_function_call> block whose body is prose ('garbage') is released as text with"
        " its tags (the body opens with neither '<' nor '{', so it is not call syntax, and the"
        " residue stripper strips only an unmatched wrapper tag); SGLang shows the body alone",
    ),
    "sglang/inkling/payload-missing-args": (
        "better: a name-only call frame: '<|content_invoke_tool_json|>{\"name\": <offered tool>}'"
        " is a call in the family's special-token frame, lifted with no arguments; SGLang's"
        " detector wants an args object and shows the payload's raw JSON as the answer"
    ),
    "sglang/inkling/unterminated-json-frame": (
        "better: text before a call: the text the model wrote before a call frame whose"
        " <|end_message|> never came stays content ('Sure, let me check.'); SGLang's recovery"
        " path lifts the call and drops everything else in the reply"
    ),
}

KNOWN.update(KNOWN_SGLANG_SG1)


# --- harmony
_H_NO_MESSAGE_TOKEN = (
    "a header the model left without <|message|> ('<|channel|>{channel} …<|end|>') is not"
    " read as a message: its tokens are stripped and the channel word stays glued to the"
    " text ({got}); openai/harmony's non-strict parser reads the words after the channel as"
    " the {channel} message's body"
)
KNOWN_HARMONY: dict[str, str] = {
    "harmony/test_harmony/invalid-utf8-decoding": _BLANKS + " (' \\ufffd \\ufffdworked')",
    "harmony/test_harmony/missing-message-token-other-headers": _open(
        "harmony header",
        _H_NO_MESSAGE_TOKEN.format(channel="analysis", got="content 'analysis I must refuse…'"),
    ),
    "harmony/tests_rs/missing-message-token-non-strict": _open(
        "harmony header",
        _H_NO_MESSAGE_TOKEN.format(channel="commentary", got="'commentary Hello'"),
    ),
}

KNOWN.update(KNOWN_HARMONY)


# --- localai
_L_INDENTED_SCALAR = _open(
    "whitespace",
    "a one-line value indented deeper than its indented <parameter=…> tags keeps the extra"
    " indentation ('  John Doe'): only the close tag's indentation is layout, the value's own"
    " past it stays (it is meaningful in code values, formats/qwen_xml.py); LocalAI (as"
    " llama.cpp) trims every value",
)
_L_THINK_AFTER_TEXT = _open(
    "reasoning after text",
    "a <think> block after the answer began stays in the content as written (only a section"
    " at the reply's start, or the one the prompt opened, is reasoning); LocalAI's"
    " ExtractReasoning moves every <think> block anywhere in the text to reasoning",
)

KNOWN_LOCALAI: dict[str, str] = {
    "localai/parse_test/json-two-objects-prose-between": _open(
        "second bare call after prose",
        "a bare JSON call, a word, then a second bare JSON call: the first is lifted, the rest"
        " ('invalid {…}') stays text (a bare object is a call only at the reply's start or"
        " after an introduction); LocalAI's ParseJSON lifts every object in the text",
    ),
    "localai/parse_test/qwen3coder-indented-typed": _L_INDENTED_SCALAR,
    "localai/parse_test/qwen3coder-indented-unicode": _L_INDENTED_SCALAR,
    "localai/parse_test/qwen3coder-xml-in-value": _L_INDENTED_SCALAR + " ('  <tag>content</tag>')",
    "localai/parse_lfm2_test/numeric-boolean-as-strings": (
        "better: typed values: set_volume(level=42, mute=false) gives the integer and boolean"
        " the schema declares (and the pythonic literals are); LocalAI's argument regexes give"
        " every value as a string ('42', 'false'), its test says a typed parser is future work"
    ),
    "localai/parse_lfm2_test/text-around": _open(
        "whitespace",
        "the LFM2 call line between two lines of prose is removed with one of its two"
        " newlines ('Sure, let me check.\\nStandby.'), where the Qwen3-Coder and Hermes cases"
        " keep both; LocalAI's test checks no content, the blank line is this transcription's"
        " reading",
    ),
    "localai/reasoning_test/think-mid-text": _L_THINK_AFTER_TEXT + " ('Text  More')",
    "localai/reasoning_test/think-unclosed-after-text": _L_THINK_AFTER_TEXT
    + " (an unclosed '<think>Incomplete' after 'Before ')",
    "localai/reasoning_test/forced-open-second-block": _L_THINK_AFTER_TEXT
    + " (a second block after the prompt-opened one closed: 'contentfinal content')",
}

KNOWN.update(KNOWN_LOCALAI)


# --- xinf
KNOWN_XINF: dict[str, str] = {
    "xinference/test_utils/qwen-think-kept-no-reasoning-parser": _THINK_PAIR
    + " (Xinference's Qwen tool parser with no reasoning parser configured)",
    "xinference/test_utils/qwen-think-kept-whole": _THINK_PAIR
    + " (Xinference's Qwen tool parser with no reasoning parser configured)",
    "xinference/test_utils/qwen-blanks-before-call-with-parser": _BLANKS
    + " (here the '\\n\\n' before a call that is the whole answer: content None, not '\\n\\n')",
    "xinference/test_utils/qwen-think-then-call-with-parser": _BLANKS
    + " (the '\\n\\n' between '</think>' and the call: content None, not '\\n\\n'; and the"
    " newlines at both ends of the reasoning, as for _O_REASONING_BLANKS)",
}

KNOWN.update(KNOWN_XINF)


# --- SGLang sg5
KNOWN_SGLANG_SG5: dict[str, str] = {
    "sglang/kimik2/bare-counter-unknown-args": _GIVEN_BACK
    + " (here a bare-counter Kimi call whose argument keys fit no offered tool)",
    "sglang/kimik3/escaped-attribute-name": (
        "better: unoffered call: a Kimi K3 call to 'a&b', a tool the request did not offer, is"
        " call markup: stripped and counted (stripped.unoffered_call), never run; SGLang's"
        " detector returns it as a call"
    ),
    "sglang/kimik3/truncated-call-header": _open(
        "given back half-stripped",
        "a Kimi K3 tools section cut off after its call header holds no call and is given back"
        " as text, whose <|open|>/<|sep|> tokens the residue stripper then removes, leaving"
        ' their words (\'toolscall tool="python" index="1"\'); SGLang drops the section',
    ),
    "sglang/qwen3coder/leading-text-newline": _B_LAYOUT_BEFORE_CALL
    + " ('Let me check.' before a Qwen3-Coder <tool_call>; SGLang keeps 'Let me check.\\n')",
    "sglang/glm4/streaming-leading-text": _B_LAYOUT_BEFORE_CALL
    + " ('Let me check.', as SGLang's own non-streaming GLM-4.5 test has it; its streaming"
    " path keeps 'Let me check. ')",
    "sglang/glm4/name-only-with-required-arg": (
        "better: a closed name-only call: '<tool_call>get_weather</tool_call>' is the model's"
        " whole call with no arguments, lifted as {} (the tool reports the missing required"
        " 'city'; GLM-4.7's detector lifts the same shape); SGLang's GLM-4.5 detector wants a"
        " newline after the name and drops it, leaving an empty reply"
    ),
    "sglang/deepseekv31/streaming-text-then-call": _B_LAYOUT_BEFORE_CALL
    + " ('Sure, let me check.'; SGLang's own non-streaming DeepSeek V3.1 test strips the blank"
    " too, its streaming path keeps it)",
}

KNOWN.update(KNOWN_SGLANG_SG5)

# --- SGLang x2
_X2_GIGACHAT_TOKENS = (
    "better: special tokens: GigaChat's <|message_sep|>/<|role_sep|>/<|function_call|> tokens"
    " are removed from markup that comes back as text (a call whose JSON is broken or cut"
    " off); SGLang returns the raw text with the tokens"
)
KNOWN_SGLANG_X2: dict[str, str] = {
    "sglang/gigachat3/invalid-json": _X2_GIGACHAT_TOKENS,
    "sglang/gigachat3-finish/partial-call-flushed": _X2_GIGACHAT_TOKENS,
}

KNOWN.update(KNOWN_SGLANG_X2)


# --- x1
KNOWN_X1: dict[str, str] = {
    "xinference/test_deepseek_v3_1_tool_parser/invalid-json-args": _DS_TOKENS_SHOWN
    + " (Xinference's DeepSeek V3.1 parser, arguments '{invalid_json')",
    "xinference/test_deepseek_v3_1_tool_parser/same-function-repeated-call": _open(
        "identical repeated call",
        "three DeepSeek V3.1 calls, the third the same name and arguments as the second, are"
        " all lifted as written; Xinference keeps the first of identical calls and drops the"
        " repeat (a policy choice, left as it is)",
    ),
    "xinference/test_deepseek_v3_1_tool_parser/stream-without-call-begin": _open(
        "call without its begin token",
        "'<｜tool▁calls▁begin｜>name<｜tool▁sep｜>{…}<｜tool▁call▁end｜>' (no"
        " <｜tool▁call▁begin｜>, as the test's streamed chunks have it) does not read: the"
        ' tokens are stripped and \'get_current_weather{"location": "上海"}\' goes out as'
        " text; Xinference's streaming parser lifts the call",
    ),
    "xinference/test_deepseek_v4_tool_parser/typed-parameters-plain": _open(
        "bare <tool_calls> wrapper",
        "DeepSeek V4's invoke markup without the '｜DSML｜' prefix under a bare '<tool_calls>'"
        " wrapper is not read (only the bare '<function_calls>' of V3.2 is: '<tool_calls>' is"
        " other families' marker too); its closes are stripped and the rest goes out as text;"
        " Xinference's DeepSeek V4 parser lifts the call",
    ),
    "xinference/test_deepseek_v41_tool_parser/text-then-calls": _B_LAYOUT_BEFORE_CALL
    + " ('Checking.' before a DeepSeek V4.1 call section; Xinference keeps 'Checking. ')",
    "xinference/test_deepseek_v41_tool_parser/text-around-calls": _B_LAYOUT_BEFORE_CALL
    + " ('Checking. Done.': the blank before the section dropped, the one after it kept;"
    " Xinference keeps both, 'Checking.  Done.')",
    "xinference/test_deepseek_v41_tool_parser/text-between-call-blocks": _B_LAYOUT_BEFORE_CALL
    + " ('Next.' between two call sections; Xinference keeps 'Next. ')",
}

KNOWN.update(KNOWN_X1)


# --- SGLang x3
KNOWN_SGLANG_X3: dict[str, str] = {
    "sglang/minimax_m3/mismatched-close": _open(
        "given back half-stripped",
        "a MiniMax M3 block whose <city> element closes with </wrong> holds no readable call and"
        " is given back as text, from which the residue stripper removes the </invoke> (a"
        " MiniMax M2 wrapper) but not the M3 namespace tokens or <tool_call>; SGLang gives the"
        " block back verbatim",
    ),
    "sglang/minicpm5/unknown-tool-preserved": (
        'better: unoffered call: a MiniCPM 5 <function name="unknown"> element naming a tool'
        " the request did not offer is call markup: stripped and counted"
        " (stripped.unoffered_call), never run and never shown as raw XML; SGLang keeps it as"
        " the content"
    ),
    **{
        f"sglang/minicpm5/{slug}": _open(
            "given back half-stripped",
            f"a MiniCPM 5 element that does not read ({why}) is given back as text, from which"
            " the residue stripper removes the </function> but not the rest of the markup;"
            " SGLang gives the element back verbatim",
        )
        for slug, why in (
            ("param-missing-name", "a <param> without a name"),
            ("duplicate-param", "the same parameter written twice"),
        )
    },
    "sglang/minicpm5/param-name-case": (
        "better: off-schema key: a closed MiniCPM 5 call to an offered tool whose parameter is"
        " spelled 'City' where the schema says 'city' is lifted as written (the tool reports"
        " the missing required 'city' and the model can retry); SGLang rejects the call and"
        " shows the raw XML to the user"
    ),
    **{
        f"sglang/muse_glimmer/pipeline-quoted-header-{slug}": _open(
            "implicit message end",
            "a '<|start|>assistant to=TOOL<|message|><atem:function_calls>…' header written"
            f" inside a to=user message not ended by <|eot|>/<|eom|> ({where}) is read as the"
            " start of a tool message, so the block is lifted as a call; SGLang keeps the"
            " header and block in the answer's text as a quotation (streamfix's stance, as in"
            " ollama/glimmer/implicit-boundary, is that a header ends the message before it)",
        )
        for slug, where in (("after-prose", "after 'after prose:'"), ("first", "first thing"))
    },
    "sglang/muse_glimmer/interleaved-reasoning": _open(
        "reasoning sections glued",
        "two to=self messages around a call give the reasoning 'first thoughtsecond thought':"
        " the splitter concatenates a repeating family's sections with nothing between; SGLang"
        " joins them with a newline as the model's reference schema does (a per-family"
        " separator in the reasoning splitter would close it)",
    ),
}

KNOWN.update(KNOWN_SGLANG_X3)
