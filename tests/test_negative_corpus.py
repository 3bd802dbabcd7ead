"""Genuine answers that look like calls in places: with the shapes' tools
offered, each comes out byte-identical after the whole chain (no call, no
stripping), streamed whole, one character per chunk, and cut at random."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from .support.detectutil import result, run_pieces
from .support.streamutil import split_sizes

CORPUS: list[str] = [
    # JSON that is not a call
    '{"name": "Alice", "age": 31, "email": "alice@example.com"}',
    '[{"id": 1, "status": "shipped"}, {"id": 2, "status": "pending"}]',
    '{"error": {"code": 404, "message": "order not found"}}',
    'Here is the payload:\n{"order_id": "A-1001", "items": [1, 2, 3]}',
    '```json\n{"name": "my-package", "version": "1.0.0", "dependencies": {}}\n```',
    '```json\n{"type": "object", "properties": {"order_id": {"type": "string"}}}\n```',
    "[1, 2, 3] is a list and {1, 2} is a set.",
    'The config:\n{\n  "port": 8080,\n  "debug": true\n}\nRestart after.',
    'Results:\n[3, 1, 2]\n["a"]\n{}\n[]',
    'Example of the format (not a call):\n{"name": "delete_everything", "arguments": {}}',
    '{"name": "lookup_order", "description": "Look up an order by id"}',
    # code calling a function with an offered tool's name
    '```python\nresult = lookup_order(order_id="A-1001")\nprint(result)\n```',
    '```python\nlookup_order("A-1001")\n```',
    "```js\nconst t = await create_ticket({title: 'x', priority: 2});\n```",
    "You can call `lookup_order(order_id)` to fetch an order.",
    "lookup_order(order_id) returns the order, or None when it is missing.",
    "Call lookup_order(order_id='A-1') and then refresh_cache() when done.",
    "The function refresh_cache() clears everything; use it sparingly.",
    "Use create_ticket(title, priority) - both are required.",
    "Try lookup_order(order_id=my_id) with your own variable.",
    "    x = refresh_cache()\n    return x",
    "[lookup_order(...)] is the pythonic form, but do not write it like that.",
    # XML / HTML
    '<div class="card"><p>Hello <b>world</b></p></div>',
    "<response><status>ok</status><count>3</count></response>",
    "Wrap them in <tools> and </tools> when documenting the API.",
    '<tools>\n  <tool name="hammer"/>\n</tools>',
    'Use <function> elements for that, e.g. <function name="f"/>.',
    "a < b and c > d, while x<y>z is generic syntax.",
    '<?xml version="1.0"?>\n<order id="A-1"/>',
    # Jinja / Mustache
    "{{ user.name }}, welcome back!",
    "Hello {{ name }}! Your order {{ order.id }} has shipped.",
    "{% for item in items %}{{ item }}{% endfor %}",
    "{{#items}}<li>{{.}}</li>{{/items}}",
    "{{ lookup }} is not a tool name here",
    # call: in prose
    "Quick call: the meeting is at 3pm.",
    "Last call:drinks at the bar.",
    "call: {first, second}",
    "We got a recall: batch 42 is affected.",
    "Make a call:\n- Alice\n- Bob",
    # markdown tables and lists
    "| tool | purpose |\n|---|---|\n| lookup_order | find an order |\n| refresh_cache | clear |",
    "1. Open the app\n2. Click **Orders**\n3. Find [your order](https://example.com/o?id=1)",
    "[Link](https://example.com) and [another][ref].\n\n[ref]: https://example.org",
    "- [ ] todo\n- [x] done",
    # unicode
    "Café — naïve résumé, 日本語のテキスト, emoji 🎉🚀, and Ελληνικά.",
    "数学: ∑ᵢ xᵢ² ≤ ∞ ; arrows ← → ⇒ ; quotes «» „“",
    "Zero\u200bwidth and RTL \u202eabc\u202c text.",
    # fences in other languages and plain code
    '```bash\ncurl -X POST https://api/x -d \'{"name": "lookup_order"}\'\n```',
    "```\nplain block without language\n```",
    "```\nls -la\ncat notes.txt\n```\nThat lists the files.",
    "Inline ``` triple backticks ``` in a sentence.",
    "```html\n<tool_call>not really</tool_call>\n```",
    # answers that explain the families' markup, in inline code and code blocks
    "Magistral opens its reasoning with `[THINK]` and closes it with `[/THINK]`.",
    "Harmony headers look like `<|start|>assistant<|channel|>final<|message|>`.",
    "The analysis channel starts with `<|channel|>analysis<|message|>` and ends at `<|end|>`.",
    "Qwen3 ends its reasoning with `</think>`; the answer follows.",
    "Use `<think>` and `</think>` to wrap the model's thoughts.",
    "Hermes models wrap a call in `<tool_call>` tags.",
    "```\n<|channel|>analysis<|message|>thinking<|end|>\n```",
    "```xml\n<think>\nplan\n</think>\n```\nThat is the layout.",
    "```text\n[THINK]plan[/THINK]answer\n```",
    '```\n<tool_call>\n{"name": "lookup_order", "arguments": {}}\n</tool_call>\n```',
    # text with brackets and braces mid-sentence
    "The set {a, b} and the list [c, d] and the tuple (e, f).",
    "functions.lookup_order is the fully-qualified name.",
    "Use the `functions` namespace: functions.lookup_order and friends.",
    "Answer: 42.",
    "",
    "   \n\n  ",
]


@pytest.mark.parametrize("text", CORPUS)
def test_genuine_answer_is_byte_identical(text: str) -> None:
    for pieces in ([text], list(text)):
        a, report = run_pieces(pieces)
        assert result(a) == (text, "", [], "stop"), pieces
        assert not report.counts.get("stripped.unparsed_call")


@given(st.sampled_from(CORPUS), st.lists(st.integers(1, 9), min_size=1, max_size=30))
def test_genuine_answer_any_chunking(text: str, sizes: list[int]) -> None:
    a, _ = run_pieces(split_sizes(text, sizes))
    assert result(a) == (text, "", [], "stop")


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 40
