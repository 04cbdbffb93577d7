"""The start tags of an HTML page, in order: what the report tests check for scripts and
injected markup."""

from html.parser import HTMLParser


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def start_tags(page: str) -> list[str]:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser.tags
