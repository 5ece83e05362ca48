#!/usr/bin/env python3
"""The built book, read by a real browser: headless Chromium opens every page and checks what a reader sees.

Doxygen's warnings-as-errors sees only its own input. This looks at the result, page by page, in Chromium
(Debian's `chromium` package) driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: no
port, no websocket, no Node), after MathJax has finished typesetting. On every page of the book:

  - MathJax ran when the page has formulas, finished, and left no TeX error and no unrendered TeX
    (`\\(`, `\\[`, `$$` in the page's text);
  - every image, embedded SVG (<object>) and inline graph (<iframe>) loaded, with a non-zero size;
  - every internal link leads to a file of the book and every #anchor to an element of that page;
  - no request failed (a file not found) and no JavaScript error or console error was reported;
  - the page's text holds no "TODO" or "FIXME" (other than the course's own `TODO(learner):` marker) and
    no leftover Doxygen command or warning;
  - every typeset formula shows something (a frame with a size);
  - at 1280 px nothing is wider than the content column: no block, code, output, table, figure or formula
    runs past it or has part of its content cut off or scrolled sideways (whole header files listed with
    line numbers excepted), no figure is taller than one screen (900 px), and no heading's line height
    is below its font size (a heading that wraps would overlap itself);
  - a lesson page (chNN_name.html) is at most 11,000 px tall: measurements have pages of their own. The
    course's limit is 12,000 px on any machine; another machine's fonts (same packages, other metrics)
    made pages measured here at 11,900 px 3% taller, so this machine keeps a margin of 1,000 px.

It writes a screenshot (the first screenful, PNG) of each chapter page, so a reviewer can flip through the
course, and prints where they are. Each failure names the page and the element; the exit status is 1 when
anything failed, 2 on bad usage or when Chromium cannot be started.

Usage: browser_check.py HTML_DIR [--screenshots DIR] [--chromium PATH] [--timeout S] [--budget S] [--only GLOB]
Standard library only. `./course book --check` runs it on build/default/book/html.
"""

import argparse
import base64
import fnmatch
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

VIEWPORT = (1280, 900)  # the first screenful of the screenshots, in CSS pixels

# Pages whose screenshot is kept: the chapter pages, their solutions pages and the front matter.
SCREENSHOT_PAGES = re.compile(r"^(index|notation|ch\d\d_[a-z0-9_]+)\.html$")

# Lesson pages (a chapter's page, not its solutions or full-output pages) must stay readable in one
# sitting: at most this tall at the check's window width, in CSS pixels. Measurements have pages of their own.
LESSON_PAGES = re.compile(r"^ch\d\d_[a-z0-9_]+(?<!_solutions)(?<!_output)\.html$")
LESSON_MAX_HEIGHT = 11000  # the limit is 12,000 px on any machine; other fonts' metrics take up the margin
LESSON_LIMIT_ANY_MACHINE = 12000

# Whole header files as Doxygen lists them (the API reference's "go to the source code of this file"):
# 120 columns of code after a line number cannot fit the column; these alone may scroll sideways.
SOURCE_LISTINGS = re.compile(r"_source\.html$")

# Runs in the page once MathJax is done; returns everything the checks need, as plain data.
INSPECT_PAGE = r"""
(() => {
  const out = {mathjax: null, tex_errors: [], unrendered: [], images: [], links: [], anchors: [],
               text_issues: []};
  const describe = (el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    const src = el.getAttribute('src') || el.getAttribute('data') || el.getAttribute('href');
    if (src) s += ' "' + src + '"';
    const near = el.closest('[id]');
    if (near && near !== el) s += ' in #' + near.id;
    return s;
  };
  const displayed = (el) => el.getClientRects().length > 0;

  // MathJax 2: every TeX script must have been typeset into a frame, without a TeX error.
  const scripts = Array.from(document.querySelectorAll('script[type^="math/tex"]'));
  if (window.MathJax && MathJax.Hub && MathJax.Hub.getAllJax) {
    out.mathjax = {version: MathJax.version || '?', jax: MathJax.Hub.getAllJax().length,
                   scripts: scripts.length};
    for (const jax of MathJax.Hub.getAllJax()) {
      const tex = (jax.originalText || '').slice(0, 80);
      const hasError = (node) => !!node && (node.type === 'merror' ||
                         (node.data || []).some((child) => hasError(child)));
      if (jax.texError || (jax.root && (jax.root.texError || hasError(jax.root))))
        out.tex_errors.push('TeX error in "' + tex + '"');
    }
    for (const script of scripts) {
      const frame = script.id && document.getElementById(script.id + '-Frame');
      if (!frame) out.tex_errors.push('not typeset: "' + script.textContent.slice(0, 80) + '"');
      else if (displayed(script.parentElement) && !(frame.getBoundingClientRect().width > 0 &&
                                                     frame.getBoundingClientRect().height > 0))
        out.tex_errors.push('typeset but shows nothing: "' + script.textContent.slice(0, 80) + '"');
    }
  }
  for (const el of document.querySelectorAll('.MathJax_Error, .MathJax_SVG_Error, merror'))
    out.tex_errors.push('MathJax error element ' + describe(el) + ': ' + el.textContent.slice(0, 80));

  // Text a reader sees, outside code: raw TeX, TODOs, Doxygen leftovers.
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const skip = 'SCRIPT, STYLE, PRE, CODE, .fragment, .line, .MathJax_SVG, .MathJax_Preview, #MSearchResults';
  const TEX = /\\\(|\\\)|\\\[|\\\]|\$\$|\\(frac|sqrt|mathrm|text|cdot|sum)\b/;
  const TODO = /\b(TODO|FIXME|XXX)\b(?!\(learner\))/;
  const DOXY = /(^|\s)[\\@](ref|snippet|image|verbinclude|include|page|section|subsection|f\$|f\[|f\]|cite|copydoc)\b|\bwarning: |Unable to resolve|\bSnippet tag\b|not found in file/;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest(skip) || !displayed(parent)) continue;
    const text = node.textContent;
    const where = (re) => {  // the element, and the text around what matched
      const at = text.search(re);
      return describe(parent) + ': "' + text.slice(Math.max(0, at - 30), at + 70).replace(/\s+/g, ' ') + '"';
    };
    if (TEX.test(text)) out.unrendered.push('unrendered TeX in ' + where(TEX));
    if (TODO.test(text)) out.text_issues.push('TODO/FIXME in ' + where(TODO));
    if (DOXY.test(text)) out.text_issues.push('Doxygen leftover in ' + where(DOXY));
  }

  // Images, embedded SVGs and inline graphs: loaded, and with a size where they are displayed.
  for (const img of document.images) {
    const r = img.getBoundingClientRect();
    out.images.push({what: describe(img), loaded: img.complete && img.naturalWidth > 0,
                     displayed: displayed(img), width: r.width, height: r.height});
  }
  for (const el of document.querySelectorAll('object[data], iframe[src]')) {
    if (/^(javascript:|about:)/i.test(el.getAttribute('data') || el.getAttribute('src'))) continue;
    const r = el.getBoundingClientRect();
    let loaded = false, inner = 0;
    try {
      const doc = el.contentDocument;
      const root = doc && doc.documentElement;
      loaded = !!root && root.tagName.toLowerCase() !== 'html' || (!!root && !!doc.body &&
               doc.body.childElementCount > 0 && !/^about:|^chrome-error:/.test(doc.URL));
      if (root && root.getBoundingClientRect) {
        const ri = root.getBoundingClientRect();
        inner = ri.width * ri.height;
      }
      if (doc) for (const a of doc.querySelectorAll('a')) {
        const href = a.getAttribute('href') || a.getAttribute('xlink:href');
        if (href) out.links.push({what: describe(el) + ' > a "' + href + '"',
                                  url: new URL(href, doc.URL).href});
      }
    } catch (e) { loaded = false; }
    out.images.push({what: describe(el), loaded: loaded && inner > 0, displayed: displayed(el),
                     width: r.width, height: r.height});
  }

  // Links: resolved by the browser; the checker decides which are the book's own.
  for (const a of document.querySelectorAll('a[href], area[href]')) {
    const raw = a.getAttribute('href');
    if (/^(javascript:|mailto:)/i.test(raw)) continue;
    out.links.push({what: describe(a), url: a.href});
  }
  // Layout at the check's window width: nothing wider than the content column (a block that runs past
  // it, or one whose content is cut or has to be scrolled sideways), no figure taller than one screen,
  // and the page's height for the length limit of a lesson.
  out.layout = {height: 0, overflow: [], tall: []};
  const column = document.querySelector('div.contents');
  const scroller = document.getElementById('doc-content');  // Doxygen's scrolling pane (tree view)
  out.layout.height = Math.max(scroller ? scroller.scrollHeight : 0, document.documentElement.scrollHeight);
  if (column) {
    const right = column.getBoundingClientRect().right;
    const blocks = 'pre, div.fragment, div.image, img, object, iframe, svg, table, div.dotgraph, ' +
                   '.MathJax_SVG_Display, .MathJax_Display, h1, h2, h3, h4, p, li, dd, dt, blockquote';
    const reported = [];
    for (const el of column.querySelectorAll(blocks)) {
      if (!displayed(el) || reported.some((outer) => outer.contains(el))) continue;
      const r = el.getBoundingClientRect();
      const inside = el.scrollWidth - el.clientWidth;
      let why = null;
      if (r.right > right + 1) why = 'runs ' + Math.round(r.right - right) + ' px past the column';
      else if (el.clientWidth > 0 && inside > 1 && !(el instanceof SVGElement))
        why = Math.round(inside) + ' px of its content cut off or scrolled sideways';
      if (why) {
        reported.push(el);
        const text = (el.textContent || '').replace(/\s+/g, ' ').trim().slice(0, 60);
        out.layout.overflow.push(describe(el) + ' ' + why + (text ? ': "' + text + '"' : ''));
      }
    }
    // A heading whose line height is below its font size overlaps itself as soon as it wraps.
    for (const el of column.querySelectorAll('h1, h2, h3, h4')) {
      const cs = getComputedStyle(el);
      if (displayed(el) && parseFloat(cs.lineHeight) < parseFloat(cs.fontSize)) {
        out.layout.overflow.push(describe(el) + ' has a line height of ' + cs.lineHeight + ' for a ' + cs.fontSize +
                                 ' font: its lines overlap when it wraps ("' + el.textContent.trim().slice(0, 50) + '")');
        break;  // one per page says it
      }
    }
    for (const el of column.querySelectorAll('object, iframe')) {  // a drawing cut by its own frame
      let inner = 0;
      try {
        const root = el.contentDocument && el.contentDocument.documentElement;
        if (root) inner = Math.max(root.scrollWidth || 0, root.getBoundingClientRect().width);
      } catch (e) { inner = 0; }
      if (displayed(el) && inner > el.clientWidth + 1 && !reported.some((outer) => outer.contains(el)))
        out.layout.overflow.push(describe(el) + ' cuts off ' + Math.round(inner - el.clientWidth) +
                                 ' px of its drawing (a figure must be sized to the column)');
    }
    for (const el of column.querySelectorAll('img, object, iframe')) {
      const r = el.getBoundingClientRect();
      if (displayed(el) && r.height > window.innerHeight)
        out.layout.tall.push(describe(el) + ' is ' + Math.round(r.height) + ' px tall, more than one screen (' +
                             window.innerHeight + ' px)');
    }
  }

  // Anchors present on this page (ids and names), for same-page links from other pages.
  for (const el of document.querySelectorAll('[id]')) out.anchors.push(el.id);
  for (const el of document.querySelectorAll('a[name]')) out.anchors.push(el.getAttribute('name'));
  return out;
})()
"""

# Resolves once MathJax has typeset the page (or at once when the page has no MathJax). MathJax 2 signals
# 'End' after its first typesetting pass (a hook registered later runs at once). Queuing more work from
# inside the hook would wait for the startup queue it runs in, forever.
WAIT_FOR_MATHJAX = r"""
new Promise((resolve) => {
  if (!window.MathJax || !MathJax.Hub || !MathJax.Hub.Register) { resolve('no MathJax'); return; }
  MathJax.Hub.Register.StartupHook('End', () => resolve('typeset'));
})
"""


class CheckError(Exception):
    """Chromium could not be started or stopped answering: the check cannot run (exit 2)."""


class Chromium:
    """Headless Chromium driven over --remote-debugging-pipe: JSON messages separated by NUL bytes,
    written to its fd 3 and read from its fd 4."""

    def __init__(self, executable, timeout):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="book-check-chromium-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        args = [executable, "--headless", "--remote-debugging-pipe", "--user-data-dir=" + self.profile,
                "--allow-file-access-from-files",  # so an embedded SVG's document can be inspected
                "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", "--mute-audio", "--font-render-hinting=none",
                "--window-size=%d,%d" % VIEWPORT]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to start as root with its sandbox (CI is root)

        def onto_fds_3_and_4():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.log = open(os.path.join(self.profile, "chromium.log"), "wb")
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                         preexec_fn=onto_fds_3_and_4, pass_fds=(3, 4))
        except OSError as e:
            raise CheckError("cannot start %s: %s" % (executable, e))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buffer = b""
        self.next_id = 0
        self.events = []  # (session, method, params), kept until the caller takes them

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except CheckError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.to_chrome, self.from_chrome):
            os.close(fd)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.from_chrome], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise CheckError("Chromium closed the pipe (exit status %s); its log: %s" %
                                 (self.proc.poll(), self._log_tail()))
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def _log_tail(self):
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read()[-2000:].decode("utf-8", "replace")

    def send(self, method, params=None, session=None, timeout=None):
        """Sends a command and returns its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read_message(deadline)
            if reply is None:
                raise CheckError("Chromium did not answer %s within %g s" % (method, timeout or self.timeout))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise CheckError("%s failed: %s" % (method, reply["error"].get("message")))
                return reply.get("result", {})
            if "method" in reply:
                self.events.append((reply.get("sessionId"), reply["method"], reply.get("params", {})))

    def wait_for(self, method, session, deadline):
        """Waits for an event; True when it came before the deadline."""
        while True:
            for i, (s, m, _) in enumerate(self.events):
                if s == session and m == method:
                    del self.events[i]
                    return True
            message = self._read_message(deadline)
            if message is None:
                return False
            if "method" in message:
                self.events.append((message.get("sessionId"), message["method"], message.get("params", {})))

    def settle(self, session, quiet, limit):
        """Collects events until no request of the page is in flight and none started for `quiet`
        seconds (the navigation tree and the search index load after the page), or `limit` passed."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            pending = set()
            for s, m, p in self.events:
                if s != session or "requestId" not in p:
                    continue
                if m == "Network.requestWillBeSent":
                    pending.add(p["requestId"])
                elif m in ("Network.loadingFinished", "Network.loadingFailed"):
                    pending.discard(p["requestId"])
            message = self._read_message(min(end, time.monotonic() + quiet))
            if message is None and not pending:
                return
            if message is not None and "method" in message:
                self.events.append((message.get("sessionId"), message["method"], message.get("params", {})))


class Book:
    """The HTML folder: which files exist and which anchors each page defines."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.anchor_cache = {}

    def pages(self, only):
        names = sorted(n for n in os.listdir(self.root) if n.endswith(".html"))
        return [n for n in names if fnmatch.fnmatch(n, only)]

    def url(self, name):
        return "file://" + urllib.request.pathname2url(os.path.join(self.root, name))

    def local_path(self, url):
        """The file a file:// URL inside the book names, or None for anything else."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "file":
            return None
        path = os.path.realpath(urllib.request.url2pathname(parts.path))
        return path if path == self.root or path.startswith(self.root + os.sep) else None

    def anchors_of(self, path):
        """The ids and names a static HTML file defines (for links into pages not yet opened)."""
        if path not in self.anchor_cache:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except FileNotFoundError:  # removed since it was listed: its anchors are gone too
                text = ""
            self.anchor_cache[path] = set(re.findall(r"""\s(?:id|name)=["']([^"']*)["']""", text))
        return self.anchor_cache[path]


def failed_requests(events, session):
    """Requests that failed or answered an error status, and JavaScript/console errors, from the
    events of one page load."""
    urls, problems = {}, []
    for s, method, p in events:
        if s != session:
            continue
        if method == "Network.requestWillBeSent":
            urls[p["requestId"]] = p["request"]["url"]
        elif method == "Network.loadingFailed" and not p.get("canceled"):
            problems.append("request failed: %s (%s)" % (urls.get(p["requestId"], "?"), p.get("errorText")))
        elif method == "Network.responseReceived" and p["response"].get("status", 200) >= 400:
            problems.append("request answered %d: %s" % (p["response"]["status"], p["response"]["url"]))
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text")
            problems.append("JavaScript error: %s (%s:%s)" % (text.splitlines()[0] if text else "?",
                                                               d.get("url", "?"), d.get("lineNumber", "?")))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            problems.append("console error: %s" % args[:200])
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            e = p["entry"]
            if e.get("source") == "network":
                continue  # the same failure is reported above, with its URL
            problems.append("console error (%s): %s %s" % (e.get("source"), e.get("text", "")[:200],
                                                          e.get("url", "")))
    return problems


def link_problems(book, page_path, found, live_anchors):
    problems = []
    for link in found["links"]:
        url = link["url"]
        target_url, _, fragment = url.partition("#")
        target = book.local_path(target_url)
        if target is None:
            if url.startswith("file:"):
                problems.append("link outside the book: %s -> %s" % (link["what"], url))
            continue  # http(s): outside the book, not checked (no network here)
        if not os.path.isfile(target):
            problems.append("broken link: %s -> %s (no such file)" % (link["what"], os.path.relpath(target, book.root)))
            continue
        if not fragment:
            continue
        fragment = urllib.parse.unquote(fragment)
        anchors = live_anchors if target == page_path else book.anchors_of(target)
        if fragment not in anchors:
            problems.append("broken anchor: %s -> %s#%s (no element with that id or name)" %
                            (link["what"], os.path.basename(target), fragment))
    return problems


def check_page(browser, session, book, name, args):
    """Opens one page and returns (problems, what MathJax did)."""
    browser.events.clear()
    deadline = time.monotonic() + args.timeout
    browser.send("Page.navigate", {"url": book.url(name)}, session)
    problems = []
    if not browser.wait_for("Page.loadEventFired", session, deadline):
        problems.append("the page did not finish loading within %g s" % args.timeout)
        return problems, None
    try:
        state = browser.send("Runtime.evaluate", {"expression": WAIT_FOR_MATHJAX, "awaitPromise": True,
                                                  "returnByValue": True}, session,
                             timeout=max(1.0, deadline - time.monotonic()))
        mathjax_state = state.get("result", {}).get("value")
    except CheckError:
        problems.append("MathJax did not finish typesetting within %g s" % args.timeout)
        mathjax_state = "timeout"
    browser.settle(session, quiet=0.1, limit=args.settle)
    result = browser.send("Runtime.evaluate", {"expression": INSPECT_PAGE, "returnByValue": True}, session)
    if "exceptionDetails" in result:
        raise CheckError("the page inspection failed on %s: %s" % (name, result["exceptionDetails"]))
    found = result["result"]["value"]

    problems += failed_requests(browser.events, session)
    try:
        with open(os.path.join(book.root, name), encoding="utf-8", errors="replace") as f:
            math_in_source = bool(re.search(r"\\\(|\\\[|\\begin\{", f.read()))
    except FileNotFoundError:  # the book was rebuilt while it was being checked
        return problems + ["the page disappeared during the check (was the book rebuilt meanwhile?)"], None
    if found["mathjax"] is None and math_in_source:
        problems.append("MathJax is not running (%s), yet the page has formulas" % mathjax_state)
    problems += found["tex_errors"] + found["unrendered"] + found["text_issues"]
    if not SOURCE_LISTINGS.search(name):
        problems += found["layout"]["overflow"]
    problems += found["layout"]["tall"]
    if LESSON_PAGES.match(name) and found["layout"]["height"] > LESSON_MAX_HEIGHT:
        problems.append("lesson page is %d px tall at %d px wide, more than %d (the limit %d on any machine, less "
                        "the margin other fonts take up): move measurements and long output to its measurements "
                        "page" % (found["layout"]["height"], VIEWPORT[0], LESSON_MAX_HEIGHT, LESSON_LIMIT_ANY_MACHINE))
    for im in found["images"]:
        if not im["loaded"]:
            problems.append("image not loaded (or empty): %s" % im["what"])
        elif im["displayed"] and (im["width"] <= 0 or im["height"] <= 0):
            problems.append("image shown with zero size (%gx%g): %s" % (im["width"], im["height"], im["what"]))
    problems += link_problems(book, os.path.join(book.root, name), found, set(found["anchors"]))

    if args.screenshots and SCREENSHOT_PAGES.match(name):
        # MathJax's "Typesetting math: 100%" box fades out a second later: not part of the page.
        browser.send("Runtime.evaluate", {"expression": "(m => m && m.remove())("
                                          "document.getElementById('MathJax_Message'))"}, session)
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, session)
        path = os.path.join(args.screenshots, name[:-len(".html")] + ".png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
    return problems, found["mathjax"]


def find_chromium(given):
    for candidate in ([given] if given else ["chromium", "chromium-browser", "google-chrome"]):
        path = shutil.which(candidate)
        if path:
            return path
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", help="the book's HTML folder (build/default/book/html)")
    parser.add_argument("--screenshots", help="write a PNG of each chapter page's first screenful here")
    parser.add_argument("--chromium", help="the browser to run (default: chromium from PATH)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per page (default 30)")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds to wait at most for late requests after typesetting (default 5)")
    parser.add_argument("--budget", type=float, default=900.0,
                        help="seconds for the whole check; pages left after it fail as unchecked (default 900)")
    parser.add_argument("--max-per-page", type=int, default=8, help="problems listed per page (default 8)")
    parser.add_argument("--only", default="*.html", help="check only the pages matching this glob")
    args = parser.parse_args()

    if not os.path.isfile(os.path.join(args.html, "index.html")):
        print("browser_check: %s has no index.html (build the book first: ./course book)" % args.html,
              file=sys.stderr)
        return 2
    executable = find_chromium(args.chromium)
    if not executable:
        print("browser_check: Chromium not found (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    if args.screenshots:
        os.makedirs(args.screenshots, exist_ok=True)
        for old in os.listdir(args.screenshots):  # a page the book no longer has leaves no stale picture
            if old.endswith(".png"):
                os.remove(os.path.join(args.screenshots, old))

    book = Book(args.html)
    pages = book.pages(args.only)
    started = time.monotonic()
    browser = Chromium(executable, args.timeout)
    failures, typeset = {}, 0
    try:
        version = browser.send("Browser.getVersion")["product"]
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(domain + ".enable", {}, session)
        browser.send("Emulation.setDeviceMetricsOverride", {"width": VIEWPORT[0], "height": VIEWPORT[1],
                                                            "deviceScaleFactor": 1, "mobile": False}, session)
        for i, name in enumerate(pages):
            if time.monotonic() - started > args.budget:  # CI must end: say what was left unchecked
                failures["(the rest)"] = ["the check used up its %g s; %d pages not checked, from %s on" %
                                          (args.budget, len(pages) - i, name)]
                print("FAIL (the rest): %s" % failures["(the rest)"][0], flush=True)
                break
            problems, mathjax = check_page(browser, session, book, name, args)
            typeset += mathjax["jax"] if mathjax else 0
            if problems:
                failures[name] = problems
                for problem in problems[:args.max_per_page]:
                    print("FAIL %s: %s" % (name, problem), flush=True)
                if len(problems) > args.max_per_page:
                    print("FAIL %s: ... and %d more problems on this page" % (name, len(problems) - args.max_per_page),
                          flush=True)
    except CheckError as e:
        print("browser_check: %s" % e, file=sys.stderr)
        return 2
    finally:
        browser.close()
    elapsed = time.monotonic() - started

    print("browser check: %d pages in %s, %d formulas typeset, %.1f s; %d pages with problems" %
          (len(pages), version, typeset, elapsed, len(failures)))
    if args.screenshots:
        shots = sorted(n for n in os.listdir(args.screenshots) if n.endswith(".png"))
        print("screenshots (first screenful of %d pages): %s" % (len(shots), os.path.realpath(args.screenshots)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
