"""Reads a Compiler Explorer link back the way Compiler Explorer does, written apart from
orchestrator/render/godbolt.py so that a test of one is not a test of itself.

The steps are compiler-explorer's `deserialiseState` (shared/url-serialization.ts):
rison-decode the fragment, lz-string `decompressFromBase64` its `z`, rison-decode
that, and unminify the GoldenLayout configuration.
"""

from __future__ import annotations

from urllib.parse import unquote

BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
MIN_KEYS = ["settings", "hasHeaders", "constrainDragToContainer", "selectionEnabled", "dimensions",
            "borderWidth", "minItemHeight", "minItemWidth", "headerHeight", "dragProxyWidth",
            "dragProxyHeight", "labels", "close", "maximise", "minimise", "popout", "content",
            "componentName", "componentState", "id", "width", "type", "height", "isClosable", "title",
            "popoutWholeStack", "openPopouts", "parentId", "activeItemIndex", "reorderEnabled",
            "borderGrabWidth"]
MIN_VALUES = [True, False, "row", "column", "stack", "component", "close", "maximise", "minimise",
              "open in new window"]


def decompress_from_base64(text: str) -> str:
    """lz-string's decompressFromBase64 (JavaScript strings: UTF-16 code units)."""
    values = [BASE64.index(c) for c in text]
    state = {"val": values[0], "position": 32, "index": 1}

    def read(count: int) -> int:
        bits, power = 0, 1
        for _ in range(count):
            bit = state["val"] & state["position"]
            state["position"] >>= 1
            if state["position"] == 0:
                state["position"] = 32
                state["val"] = values[state["index"]] if state["index"] < len(values) else 0
                state["index"] += 1
            bits |= (1 if bit else 0) * power
            power <<= 1
        return bits

    dictionary: dict[int, str] = {0: "", 1: "", 2: ""}
    enlarge_in, size, num_bits = 4, 4, 3
    first = read(2)
    if first == 2:
        return ""
    c = chr(read(8 if first == 0 else 16))
    dictionary[3] = c
    w = c
    result = [c]
    while True:
        if state["index"] > len(values):
            raise ValueError("lz-string stream ended early")
        code = read(num_bits)
        if code in (0, 1):
            dictionary[size] = chr(read(8 if code == 0 else 16))
            size += 1
            code = size - 1
            enlarge_in -= 1
        elif code == 2:
            joined = "".join(result)
            units = joined.encode("utf-16-le", "surrogatepass")
            return units.decode("utf-16-le", "surrogatepass")
        if enlarge_in == 0:
            enlarge_in, num_bits = 2 ** num_bits, num_bits + 1
        if code in dictionary and dictionary[code]:
            entry = dictionary[code]
        elif code == size:
            entry = w + w[0]
        else:
            raise ValueError(f"bad lz-string code {code}")
        result.append(entry)
        dictionary[size] = w + entry[0]
        size += 1
        enlarge_in -= 1
        w = entry
        if enlarge_in == 0:
            enlarge_in, num_bits = 2 ** num_bits, num_bits + 1


class _Rison:
    NOT_IDCHAR = " '!:(),*@$"

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def value(self):
        c = self.text[self.pos]
        if c == "(":
            self.pos += 1
            out = {}
            while self.text[self.pos] != ")":
                if out:
                    assert self.text[self.pos] == ",", self.text[self.pos:self.pos + 20]
                    self.pos += 1
                key = self.value()
                assert self.text[self.pos] == ":"
                self.pos += 1
                out[key] = self.value()
            self.pos += 1
            return out
        if c == "!":
            kind = self.text[self.pos + 1]
            self.pos += 2
            if kind == "(":
                items = []
                while self.text[self.pos] != ")":
                    if items:
                        self.pos += 1
                    items.append(self.value())
                self.pos += 1
                return items
            return {"t": True, "f": False, "n": None}[kind]
        if c == "'":
            self.pos += 1
            out = []
            while (c := self.text[self.pos]) != "'":
                if c == "!":
                    self.pos += 1
                    c = self.text[self.pos]
                    assert c in "!'"
                out.append(c)
                self.pos += 1
            self.pos += 1
            return "".join(out)
        if c == "-" or c.isdigit():
            start = self.pos
            self.pos += 1
            while self.pos < len(self.text) and (self.text[self.pos].isdigit() or self.text[self.pos] in ".e-"):
                self.pos += 1
            number = self.text[start:self.pos]
            return float(number) if any(ch in number for ch in ".e") else int(number)
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in self.NOT_IDCHAR:
            self.pos += 1
        return self.text[start:self.pos]


def unrisonify(text: str):
    parser = _Rison("(" + unquote(text.replace("+", "%20")) + ")")
    value = parser.value()
    assert parser.pos == len(parser.text)
    return value


def unminify(value, key: bool = False):
    if isinstance(value, dict):
        return {unminify(k, key=True): unminify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unminify(v) for v in value]
    if isinstance(value, str) and len(value) == 1:
        return (MIN_KEYS if key else MIN_VALUES)[int(value, 36)]
    if isinstance(value, str) and value.startswith("___"):
        return value[3]
    return value


def decode_godbolt(url: str) -> dict:
    """The GoldenLayout configuration a https://godbolt.org/#z:... link opens."""
    assert url.startswith("https://godbolt.org/#"), url[:40]
    outer = unrisonify(url.removeprefix("https://godbolt.org/#"))
    inner = unrisonify(decompress_from_base64(outer["z"]))
    return unminify(inner)
