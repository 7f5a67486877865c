"""Headless Chromium over the DevTools protocol on a pipe (`--remote-debugging-pipe`): no driver,
no websocket library, no port. Used by tests/test_browser.py and scripts/screenshots.py (the
README's pictures), and for a quick look at one report:

    python3 -m tests.chromium screenshot report.html shot.png [WIDTH HEIGHT]
"""
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-pipe"]


def find_chromium():
    for name in (os.environ.get("SMLENS_CHROMIUM"), "chromium", "chromium-browser", "google-chrome",
                 "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def require_chromium():
    """Chromium's path for a test: the test is skipped where there is none, and fails in CI, which
    must run the report's browser tests."""
    import pytest  # here, not at the top: scripts/screenshots.py imports this module too

    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Chromium for the report tests: apt-get install chromium")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    return binary


class Browser:
    def __init__(self, binary, window=(1400, 1000)):
        self.profile = tempfile.mkdtemp(prefix="smlens-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds():  # the protocol's fixed descriptors: 3 reads commands, 4 writes replies
            # Move both out of the way first: either may already sit on 3 or 4.
            high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}",
             f"--window-size={window[0]},{window[1]}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events = []

    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None, timeout=60.0):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method, session, timeout=60.0):
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method and event.get("sessionId") == session:
                return event
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method and event.get("sessionId") == session:
                return event

    def open(self, url, timeout=60.0):
        """A new tab with console and log capture on; returns its session id once loaded."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session=session)
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session, timeout)
        return session

    def evaluate(self, session, expression, timeout=60.0):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=session,
                           timeout=timeout)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self, session):
        """Console errors, uncaught exceptions and error-level log entries of one tab."""
        found = []
        for event in self.events:
            if event.get("sessionId") != session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(f"{details.get('text', 'exception')} "
                             f"{details.get('exception', {}).get('description', '')}".strip())
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)

    def screenshot(self, session, path, width, height):
        import base64

        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                         "deviceScaleFactor": 1, "mobile": False},
                  session=session)
        shot = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False},
                         session=session)
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(shot["data"]))


def main(argv):
    from pathlib import Path

    if len(argv) < 3 or argv[0] != "screenshot":
        raise SystemExit("usage: python3 -m tests.chromium screenshot REPORT.html OUT.png [W H]")
    binary = find_chromium()
    if binary is None:
        raise SystemExit("no chromium on PATH (apt-get install chromium)")
    width, height = (int(argv[3]), int(argv[4])) if len(argv) >= 5 else (1400, 1700)
    browser = Browser(binary, window=(width, height))
    try:
        session = browser.open(Path(argv[1]).resolve().as_uri())
        browser.screenshot(session, argv[2], width, height)
        errors = browser.errors(session)
    finally:
        browser.close()
    if errors:
        raise SystemExit(f"console errors: {errors}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
