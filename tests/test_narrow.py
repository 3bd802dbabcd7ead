"""Tool narrowing, the pure part (``streamfix/narrow.py``) and the body it
makes (``plan.narrow_to_tools``): the turn, the tools' text, BM25, the
decision and its margin, the note step, the bounded vector cache."""

from __future__ import annotations

from typing import Any

from streamfix import narrow
from streamfix.context import Context
from streamfix.delta import Delta, ToolCall
from streamfix.server.plan import narrow_to_tools


def fn(name: str, desc: str = "", **params: str) -> dict[str, Any]:
    props = {k: {"type": "string", "description": v} for k, v in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": props},
        },
    }


#: Twenty tools an agent might offer, each about one thing.
TOOLS = [
    fn("get_weather", "Current weather for a city.", city="City name"),
    fn("sendEmail", "Send an email message to a recipient.", to="Address", body="Text"),
    fn("create-calendar-event", "Add an event to the calendar.", title="Title", when="Time"),
    fn("stock.quote", "Latest price of a stock ticker.", ticker="Ticker symbol"),
    fn("translate_text", "Translate text into another language.", text="Text", lang="Target"),
    fn("search_flights", "Find flights between two airports.", origin="From", dest="To"),
    fn("book_hotel", "Reserve a hotel room.", city="City", nights="Nights"),
    fn("convert_currency", "Convert an amount between currencies.", amount="Amount"),
    fn("play_music", "Play a song or playlist.", song="Song title"),
    fn("set_alarm", "Set an alarm clock for a time.", time="Time of day"),
    fn("read_file", "Read a file from disk.", path="File path"),
    fn("write_file", "Write text to a file on disk.", path="File path", content="Text"),
    fn("run_shell", "Run a shell command.", command="Command line"),
    fn("create_ticket", "Open a support ticket.", title="Summary"),
    fn("lookup_order", "Look an order up by its id.", order_id="Order id"),
    fn("refund_order", "Refund a paid order.", order_id="Order id"),
    fn("get_news", "Latest news headlines on a topic.", topic="Topic"),
    fn("calculate", "Evaluate an arithmetic expression.", expression="Expression"),
    fn("define_word", "Dictionary definition of a word.", word="Word"),
    fn("order_pizza", "Order a pizza for delivery.", size="Size", toppings="Toppings"),
]
NAMES = narrow.tool_names(TOOLS)


def test_words_split_names_in_every_style() -> None:
    assert narrow.words("sendEmail") == ["send", "email"]
    assert narrow.words("create-calendar-event") == ["creat", "calendar", "event"]
    assert narrow.words("stock.quote get_HTTPResponse") == ["stock", "quot", "http", "respons"]
    # stop words out; one stem for a word's forms
    assert narrow.words("the orders of flights") == ["order", "flight"]
    assert {*narrow.words("create creates created creating")} == {"creat"}


def test_tool_text_has_the_name_description_and_parameters() -> None:
    text = narrow.tool_text(
        {
            "name": "lookup_order",
            "description": "Look an order up.",
            "parameters": {
                "type": "object",
                "properties": {
                    "filter": {
                        "type": "object",
                        "description": "Which ones",
                        "properties": {"customer_email": {"type": "string"}},
                    }
                },
            },
        }
    )
    for part in ("lookup_order", "Look an order up.", "filter", "Which ones", "customer_email"):
        assert part in text


def test_the_turn_is_the_last_user_message_and_a_tool_result_after_it() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "What is the weather in Oslo?"}]},
    ]
    assert narrow.turn_text(msgs) == "What is the weather in Oslo?"
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "Snow; flights cancelled"},
    ]
    assert narrow.turn_text(msgs) == "What is the weather in Oslo?\nSnow; flights cancelled"
    assert narrow.called_before(msgs) == {"get_weather"}


def test_bm25_ranks_the_tool_the_turn_is_about_first() -> None:
    for turn, want in (
        ("What's the weather like in Paris today?", "get_weather"),
        ("Please email Bob the report", "sendEmail"),
        ("Put a meeting on my calendar for Monday", "create-calendar-event"),
        ("How much is AAPL stock trading at?", "stock.quote"),
        ("I want a refund for order 1234", "refund_order"),
    ):
        names, scores = narrow.rank_lexical(TOOLS, turn)
        assert names[max(range(len(scores)), key=scores.__getitem__)] == want, turn


def test_a_clear_turn_is_narrowed_to_the_top_few_with_a_margin() -> None:
    names, scores = narrow.rank_lexical(TOOLS, "What's the weather like in Paris today?")
    d = narrow.decide(names, scores)
    assert d.narrowed and d.outcome == "narrowed" and d.offered == 20
    assert d.kept is not None and d.kept[0] == "get_weather" and len(d.kept) == narrow.KEEP
    rel = narrow.relative(scores)
    left_out = [r for n, r in zip(names, rel, strict=True) if n not in d.kept]
    assert max(left_out) < narrow.RATIO  # the margin between kept and the rest
    assert d.note() == {"kept": d.kept, "of": 20}


def test_earlier_calls_stay_offered() -> None:
    names, scores = narrow.rank_lexical(TOOLS, "What's the weather like in Paris today?")
    d = narrow.decide(names, scores, keep_also={"order_pizza", "not_offered"})
    assert d.kept is not None and "order_pizza" in d.kept and "not_offered" not in d.kept
    assert len(d.kept) == narrow.KEEP + 1


def test_few_tools_or_an_unsure_ranking_narrow_nothing() -> None:
    names, scores = narrow.rank_lexical(TOOLS[:8], "weather in Paris")
    assert narrow.decide(names, scores).outcome == "few_tools"
    # nothing matches at all
    names, scores = narrow.rank_lexical(TOOLS, "hmm")
    d = narrow.decide(names, scores)
    assert not d.narrowed and d.outcome == "not_confident" and d.kept is None
    # too many tools are as good as the best: the ranking cannot tell
    flat = [1.0] * 7 + [0.0] * 13
    assert narrow.decide(NAMES, flat).outcome == "not_confident"
    assert narrow.decide(NAMES, [1.0] * 5 + [0.0] * 15).narrowed


def test_cosine_scores_take_the_same_decision_path() -> None:
    vectors = [[1.0, 0.0, 0.2]] + [[0.0, 1.0, 0.2]] * 19
    scores = narrow.cosine(vectors, [1.0, 0.0, 0.0])
    d = narrow.decide(NAMES, scores)
    assert d.kept is not None and d.kept[0] == NAMES[0]
    assert narrow.cosine([[0.0, 0.0]], [1.0, 0.0]) == [0.0]


def test_the_vector_cache_is_bounded_least_recently_used_out() -> None:
    cache = narrow.VectorCache(size=2)
    a, b, c = (narrow.VectorCache.key("emb", [t]) for t in ("a", "b", "c"))
    assert narrow.VectorCache.key("emb", ["a", "b"]) != narrow.VectorCache.key("emb", ["ab"])
    cache.put(a, [[1.0]])
    cache.put(b, [[2.0]])
    assert cache.get(a) == [[1.0]]  # a is now the most recent
    cache.put(c, [[3.0]])
    assert len(cache) == 2 and cache.get(b) is None and cache.get(a) == [[1.0]]


def test_the_note_step_marks_the_finish_and_sees_the_calls() -> None:
    called: set[str] = set()
    make = narrow.NarrowNote.factory({"kept": ["a"], "of": 9}, called)
    step = make(Context.of({"tools": TOOLS}, {}))
    d = Delta(calls=[ToolCall("get_weather", "{}")])
    step.feed(d)
    last = Delta(finish_reason="tool_calls", ext={"cut": "repetition"})
    step.close(last)
    assert called == {"get_weather"}
    assert last.ext == {"cut": "repetition", "narrowed": {"kept": ["a"], "of": 9}}
    assert step.ignores_content and step.ignores_reasoning  # off both fast lanes


def test_narrow_to_tools_sends_the_kept_tools_with_their_purposes() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
    out = narrow_to_tools(body, ["stock.quote", "get_weather", "absent"])
    assert narrow.tool_names(out["tools"]) == ["stock.quote", "get_weather"]
    assert out["tool_choice"] == "auto" and body["tools"] is TOOLS
    assert out["messages"][0] == {
        "role": "system",
        "content": "For this turn, call the tool that fits among: stock.quote (Latest price "
        "of a stock ticker); get_weather (Current weather for a city).",
    }
    required = narrow_to_tools({**body, "tool_choice": "required"}, ["get_weather"])
    assert required["tool_choice"] == "auto"
    assert required["messages"][0]["content"].startswith("Answer this turn by calling one of")


def test_what_agents_add_for_the_model_is_not_the_turn() -> None:
    reminder = (
        "<system-reminder>\nEnd git commit messages with a pull request line\n</system-reminder>"
    )
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": reminder},
                {"type": "text", "text": "Weather in Oslo?"},
            ],
        }
    ]
    assert narrow.turn_text(msgs).split() == ["Weather", "in", "Oslo?"]
    env = "<environment_context><cwd>/w</cwd></environment_context> list the git commits"
    assert narrow.turn_text([{"role": "user", "content": env}]).split() == [
        "list",
        "the",
        "git",
        "commits",
    ]


def test_a_tool_set_seen_before_is_scored_from_its_cached_index() -> None:
    cache = narrow.VectorCache()
    first = narrow.rank_lexical(TOOLS, WEATHER_TURN, cache)
    (index,) = cache._sets.values()
    assert isinstance(index, narrow.Bm25)
    assert narrow.rank_lexical(TOOLS, WEATHER_TURN, cache) == first
    assert len(cache) == 1 and next(iter(cache._sets.values())) is index
    assert narrow.rank_lexical(TOOLS, WEATHER_TURN) == first  # the same without a cache


WEATHER_TURN = "What's the weather like in Paris today?"
