"""Genuine answers a learned shape must leave as they are
(``server/learn.py``): prose, code, JSON, markdown, XML and answers that
name tools or explain call markup, beside ``passthrough.PROSE``. A shape
whose markers would open a region in any of them is not offered."""

from __future__ import annotations

from .passthrough import PROSE

GENUINE: tuple[str, ...] = (
    *PROSE,
    '{"name": "Alice", "age": 31, "email": "alice@example.com"}',
    '[{"id": 1, "status": "shipped"}, {"id": 2, "status": "pending"}]',
    'Here is the payload:\n{"order_id": "A-1001", "items": [1, 2, 3]}',
    '```json\n{"type": "object", "properties": {"city": {"type": "string"}}}\n```',
    'Example of the format (not a call):\n{"name": "get_weather", "arguments": {}}',
    'The config:\n{\n  "port": 8080,\n  "debug": true\n}\nRestart after.',
    '```python\nresult = get_weather(city="Paris")\nprint(result)\n```',
    "You can call `get_weather(city)` to fetch the forecast.",
    "get_weather is the tool I would use; it takes a city.",
    "Use search(query) first, then get_weather(city) for each place.",
    "```js\nconst w = await get_weather({city: 'Oslo'});\n```",
    '```bash\ncurl -X POST https://api/x -d \'{"city": "Paris"}\'\n```',
    "| tool | purpose |\n|---|---|\n| get_weather | the forecast |\n| search | the web |",
    "1. Open the app\n2. Click **Orders**\n3. Find [your order](https://example.com/o?id=1)",
    "- [ ] todo\n- [x] done\n\n> a quote, and `inline code`.",
    "## Heading\n\nSome *emphasis*, a rule below.\n\n---\n\nThe end.",
    '<div class="card"><p>Hello <b>world</b></p></div>',
    '<?xml version="1.0"?>\n<order id="A-1"/>',
    "{{ user.name }}, welcome back! {% for i in items %}{{ i }}{% endfor %}",
    "Hermes models wrap a call in `<tool_call>` tags.",
    "Quick call: the meeting is at 3pm. Last call:drinks at the bar.",
    "@@ -1,3 +1,4 @@\n-old line\n+new line\n context",
    "$ make && ./run --city Paris\n>>> print({'city': 'Paris'})\n{'city': 'Paris'}",
    "SELECT name FROM users WHERE id = 1; -- {not json}",
    "Résumé, 日本語のテキスト, emoji 🎉, arrows ← → ⇒, maths ∑ xᵢ² ≤ ∞.",
    "Answer: 42.",
)
