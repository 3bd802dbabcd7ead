"""What a new set of offered tools costs the detector: building its matcher.

    python -m bench.matcher [--rounds 5] [--skip-large]

Builds ``transforms.detect.Matcher`` for 50 tool names of real APIs, for
512 random names of 64 characters and for 512 of 256 (the proxy's limits,
``caller.validate.MAX_TOOLS`` and ``MAX_TOOL_NAME_CHARS``), ``--rounds``
times each with ``re``'s pattern cache emptied first (a new set, as on its
first request), and prints the median in ms of CPU. The registry's own
markers, compiled once per process, are built before and shown apart.

Run against an older checkout (``PYTHONPATH=that/checkout python
bench/matcher.py``) to compare; there a 512 x 256 set takes about a
minute a round (``--skip-large`` leaves it out).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import string
import sys
import time

from streamfix.spec import ToolSpec
from streamfix.transforms.detect import Matcher

#: Tool names of real APIs (file, web, mail, calendar, shop, payments…).
REAL = [
    "get_weather", "search_web", "read_file", "write_file", "list_directory",
    "run_shell_command", "send_email", "create_calendar_event", "get_stock_price",
    "translate_text", "query_database", "fetch_url", "create_issue", "list_pull_requests",
    "merge_pull_request", "get_user_profile", "update_user_profile", "delete_record",
    "upload_file", "download_file", "resize_image", "generate_image", "summarize_document",
    "extract_entities", "classify_text", "get_current_time", "convert_currency",
    "book_flight", "cancel_booking", "find_restaurants", "get_directions",
    "calculate_route", "play_music", "set_timer", "set_reminder", "get_news", "post_tweet",
    "search_products", "add_to_cart", "checkout", "track_package", "get_exchange_rate",
    "create_invoice", "list_invoices", "refund_payment", "get_account_balance",
    "transfer_funds", "open_ticket", "close_ticket", "escalate_ticket",
]  # fmt: skip


def random_names(n: int, length: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [
        "".join(rnd.choice(string.ascii_letters) for _ in range(length - 6)) + f"_{i:05d}"
        for i in range(n)
    ]


def build_ms(names: list[str]) -> float:
    """CPU time of one build of a matcher for ``names``, ms."""
    tools = {n: ToolSpec(n, {"type": "object"}) for n in names}
    re.purge()
    t0 = time.process_time()
    Matcher(tools)
    return (time.process_time() - t0) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip-large", action="store_true", help="leave out 512 x 256")
    args = ap.parse_args(argv)
    re.purge()
    t0 = time.process_time()
    Matcher({})
    print(f"the registry's markers (once per process): {(time.process_time() - t0) * 1e3:.1f} ms")
    cases = [("50 real tool names", REAL), ("512 names x 64 chars", random_names(512, 64, 1))]
    if not args.skip_large:
        cases.append(("512 names x 256 chars", random_names(512, 256, 2)))
    print(f"a new set of tools, median of {args.rounds} rounds (ms of CPU):")
    for label, names in cases:
        ms = statistics.median(build_ms(names) for _ in range(args.rounds))
        print(f"  {label:<24s}{ms:10.2f} ms   ({ms / len(names) * 1e3:.1f} us per tool)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
