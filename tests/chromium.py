"""Headless Chromium driven over the DevTools protocol (real browser, real layout).

:func:`look` opens a page at a window size, evaluates a JavaScript expression in it (element
geometry from ``getBoundingClientRect``, what is displayed) and takes a screenshot. Each call
starts its own browser with its own profile folder and a port the browser picks
(``--remote-debugging-port=0``, read back from ``DevToolsActivePort``), so tests run side by
side. Tests skip, with the reason, where Debian's ``chromium`` is not installed.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

_DEADLINE_S = 90.0  # generous: the machine is shared


def chromium() -> str:
    """The ``chromium`` binary, or skip the test saying why."""
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it when root)")
    return path


@dataclass(frozen=True)
class Look:
    """What :func:`look` saw: the expression's value and the screenshots (PNG bytes) of the
    first screen (``screen``) and of the whole page (``full``)."""

    value: Any
    screen: bytes
    full: bytes


def look(
    url: str, *, width: int, height: int, expression: str, profile: Path, steps: str = ""
) -> Look:
    """Open ``url`` in a ``width`` × ``height`` window, run ``steps`` (a statement, e.g. a
    click) then evaluate ``expression`` (its value returned by value), and take screenshots.
    ``profile``: an empty folder for the browser's profile."""
    websockets = pytest.importorskip("websockets")
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "DevToolsActivePort").unlink(missing_ok=True)  # a previous browser's
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "about:blank",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ws_url = _endpoint(profile / "DevToolsActivePort", proc)
        return asyncio.run(
            asyncio.wait_for(
                _drive(websockets, ws_url, url, width, height, expression, steps), _DEADLINE_S
            )
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _endpoint(port_file: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + _DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"chromium exited with {proc.returncode}: {err[-2000:]}")
        try:
            port, path = port_file.read_text().split()[:2]
            return f"ws://127.0.0.1:{int(port)}{path}"
        except (OSError, ValueError):
            time.sleep(0.1)
    raise TimeoutError(f"chromium wrote no {port_file.name} within {_DEADLINE_S:.0f} s")


async def _drive(
    websockets: Any, ws_url: str, url: str, width: int, height: int, expression: str, steps: str
) -> Look:
    async with websockets.connect(ws_url, max_size=None) as ws:
        ids = itertools.count(1)

        async def call(method: str, params: dict[str, Any] | None = None, session: str = "") -> Any:
            i = next(ids)
            msg: dict[str, Any] = {"id": i, "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            await ws.send(json.dumps(msg))
            while True:
                reply = json.loads(await ws.recv())
                if reply.get("id") == i:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})

        target = await call("Target.createTarget", {"url": "about:blank"})
        attached = await call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        s = attached["sessionId"]
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        await call("Emulation.setDeviceMetricsOverride", metrics, s)
        await call("Page.navigate", {"url": url}, s)

        async def evaluate(expr: str) -> Any:
            got = await call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, s)
            if "exceptionDetails" in got:
                raise RuntimeError(f"{expr[:80]}…: {got['exceptionDetails']}")
            return got["result"].get("value")

        while await evaluate("document.readyState") != "complete":
            await asyncio.sleep(0.1)
        if steps:
            await evaluate(f"(() => {{ {steps} }})()")
        value = await evaluate(expression)
        screen = await call("Page.captureScreenshot", {"format": "png"}, s)
        size = (await call("Page.getLayoutMetrics", session=s))["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 16000)}
        full = await call(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": {**clip, "scale": 1}},
            s,
        )
        return Look(value, base64.b64decode(screen["data"]), base64.b64decode(full["data"]))
