"""The operator page's learned shapes (``/ui/shapes``): a shape inferred
from the recordings is shown with the replies it came from and what replay
says, and "add to config" (operator key, CSRF) writes the shapes file and
reloads."""

from __future__ import annotations

from pathlib import Path

from streamfix.formats.declared import load_shapes
from streamfix.shapes import in_effect, use_shapes

from .support.learncases import LEARN, SHAPES, record, render
from .support.ui_scene import scene
from .test_ui import browser, csrf_of, get, logged_in


async def test_a_learned_shape_is_shown_and_added_to_the_config(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    names = [record(rec, render(SHAPES["angle-fn"], call)) for call in LEARN]
    shapes = tmp_path / "shapes.toml"
    try:
        async with scene(rec, serve=False, shapes=str(shapes)) as sc, browser() as s:
            assert (await get(s, sc.root + "/ui/shapes"))[0] == 401  # the operator's only
            await logged_in(s, sc)
            status, text = await get(s, sc.root + "/ui/shapes")
            assert status == 200
            assert "learned_fn" in text and "&lt;&lt;fn:" in text  # escaped TOML
            for p in names:
                assert p is not None and f'href="/ui/recordings/{p.name}"' in text
            assert "lifts lookup_order" in text and "Proved" in text
            url = sc.root + "/ui/shapes/add"
            async with s.post(url, data={"shape": "learned_fn"}, allow_redirects=False) as r:
                assert r.status == 403  # no CSRF token
            assert not shapes.exists() and sc.reloads == []
            token = await csrf_of(s, sc.root + "/ui/shapes")
            async with s.post(
                url, data={"csrf": token, "shape": "learned_fn"}, allow_redirects=False
            ) as r:
                assert r.status == 303
                assert r.headers["Location"] == "/ui/shapes?done=added"
            assert [x.start for x in load_shapes(shapes)] == [("<<fn:",)]
            assert sc.reloads == [1]
            plugin = in_effect()
            assert plugin is not None and [f.name for f in plugin.FORMATS] == ["learned_fn"]
            # a shape not offered is not added
            async with s.post(
                url, data={"csrf": token, "shape": "nope"}, allow_redirects=False
            ) as r:
                assert r.headers["Location"] == "/ui/shapes?done=not_added"
    finally:
        use_shapes(None)


async def test_without_a_shapes_file_the_page_says_how(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    for call in LEARN:
        record(rec, render(SHAPES["at-call"], call))
    async with scene(rec, serve=False) as sc, browser() as s:
        await logged_in(s, sc)
        _, text = await get(s, sc.root + "/ui/shapes")
        assert "start the proxy with --shapes FILE" in text
        assert "disabled" in text
