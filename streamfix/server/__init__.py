"""The aiohttp proxy app, upstreams, budgets, middlewares, metrics."""
