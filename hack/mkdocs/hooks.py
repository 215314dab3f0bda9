"""mkdocs hooks for Portal's documentation site (mkdocs.yml: hooks).

Strict mode in mkdocs 1.4 (Debian's) fails on a link to a missing .md page but
checks neither anchors nor links to directories. These hooks close that gap, so
`mkdocs build --strict` fails on any broken link or anchor:

- on_page_markdown: a relative link that leaves docs/ (to ../../examples/waf/,
  ../README.md) points at a repository file. It must exist, and a fragment on a
  Markdown target must name one of its headings; the link becomes a link to the
  file on the repository host (repo_url), which is also where it leads on GitHub.
- on_post_build: every relative link in every built page must reach a built
  file, and its fragment an id in that file.

Each problem is logged as a warning, which strict mode turns into a failure.
"""

import html.parser
import logging
import os
import re
import urllib.parse

log = logging.getLogger("mkdocs.hooks.portal")

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_LINK = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_REF_LINK = re.compile(r"^(\s{0,3}\[[^\]]+\]:\s*)(\S+)(.*)$")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _github_slug(heading):
    """The anchor GitHub (and this site's toc slugify) gives a heading."""
    text = re.sub(r"</?[^>]*>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _markdown_anchors(path):
    anchors, in_fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if _FENCE.match(line):
                in_fence = not in_fence
                continue
            m = None if in_fence else _HEADING.match(line)
            if m:
                anchors.add(_github_slug(m.group(1)))
    return anchors


def _is_external(target):
    parts = urllib.parse.urlsplit(target)
    return bool(parts.scheme or parts.netloc) or target.startswith(("#", "/"))


def _rewrite_target(target, page, config):
    """The repository URL for a link that leaves docs/, or the link unchanged."""
    if _is_external(target):
        return target
    path, _, fragment = target.partition("#")
    docs_dir = os.path.abspath(config["docs_dir"])
    root = os.path.dirname(os.path.abspath(config["config_file_path"]))
    resolved = os.path.normpath(
        os.path.join(os.path.dirname(page.file.abs_src_path), urllib.parse.unquote(path)))
    if resolved == docs_dir or resolved.startswith(docs_dir + os.sep):
        return target
    where = page.file.src_path
    if not resolved.startswith(root + os.sep) or not os.path.exists(resolved):
        log.warning("%s links to %r, which is not a file or directory in the repository", where, target)
        return target
    if fragment and resolved.endswith(".md") and fragment not in _markdown_anchors(resolved):
        log.warning("%s links to %r: %s has no heading with anchor #%s", where, target,
                    os.path.relpath(resolved, root), fragment)
    rel = os.path.relpath(resolved, root).replace(os.sep, "/")
    kind = "tree" if os.path.isdir(resolved) else "blob"
    url = "%s/%s/main/%s" % (config["repo_url"].rstrip("/"), kind, rel)
    return url + ("#" + fragment if fragment else "")


def on_page_markdown(markdown, page, config, files):
    out, in_fence = [], False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            line = _INLINE_LINK.sub(
                lambda m: m.group(1) + _rewrite_target(m.group(2), page, config) + m.group(3), line)
            line = _REF_LINK.sub(
                lambda m: m.group(1) + _rewrite_target(m.group(2), page, config) + m.group(3), line)
        out.append(line)
    return "\n".join(out)


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("id", "name"):
            if attrs.get(name):
                self.ids.add(attrs[name])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


def on_post_build(config):
    site = os.path.abspath(config["site_dir"])
    pages = {}
    for dirpath, _, names in os.walk(site):
        for name in names:
            if name.endswith(".html"):
                path = os.path.join(dirpath, name)
                parser = _Page()
                with open(path, encoding="utf-8") as f:
                    parser.feed(f.read())
                pages[path] = parser
    for path, page in sorted(pages.items()):
        if os.path.basename(path) == "404.html":
            continue  # served at any depth; its relative links are not meant to resolve here
        for href in page.links:
            parts = urllib.parse.urlsplit(href)
            if parts.scheme or parts.netloc:
                continue
            target = path
            if parts.path:
                target = os.path.normpath(
                    os.path.join(os.path.dirname(path), urllib.parse.unquote(parts.path)))
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
            where = os.path.relpath(path, site)
            if not os.path.exists(target):
                log.warning("%s links to %r, which the site does not have", where, href)
                continue
            fragment = urllib.parse.unquote(parts.fragment)
            if fragment and target in pages and fragment not in pages[target].ids:
                log.warning("%s links to %r: %s has no anchor #%s", where, href,
                            os.path.relpath(target, site), fragment)
