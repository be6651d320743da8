"""corpus.py - JSON Schemas for the JSON Schema -> GBNF converter
(src/engine/text/json_schema.c), with instances.

Each case: name, schema, and either
  valid   instances the schema accepts, written in the grammar's canonical
          form (members in the order of "properties"); check.py asserts that
          the `jsonschema` package accepts them AND the grammar does,
  invalid instances the schema rejects; both must reject them,
or
  error   (status, words): the conversion fails with that status
          (unsupported / invalid argument / capacity) and a message
          containing the words.
"""

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}

CASES = [
    # ---- primitives
    dict(name="string", schema={"type": "string"},
         valid=["", "hello", "a \"quoted\" word", "tab\tnew\nline", "caf\u00e9 \u6771\u4eac"],
         invalid=[1, None, True, [], {}]),
    dict(name="integer", schema={"type": "integer"},
         valid=[0, -1, 42, 123456789], invalid=[1.5, "1", None]),
    dict(name="number", schema={"type": "number"},
         valid=[0, -1.5, 3.25, 1e10, 2.5e-3], invalid=["1", None, []]),
    dict(name="boolean", schema={"type": "boolean"}, valid=[True, False], invalid=[0, "true", None]),
    dict(name="null", schema={"type": "null"}, valid=[None], invalid=[0, "", False]),
    dict(name="any", schema={}, valid=[1, "x", None, [1, {"a": 2}], {"k": [True]}]),
    dict(name="true schema", schema=True, valid=[1, "x", [], {}]),
    # ---- strings
    dict(name="string enum", schema={"type": "string", "enum": ["red", "green", "blue"]},
         valid=["red", "blue"], invalid=["Red", "yellow", 1]),
    dict(name="mixed enum", schema={"enum": ["a", 1, None, True]},
         valid=["a", 1, None, True], invalid=["b", 2, False]),
    dict(name="const", schema={"const": "fixed"}, valid=["fixed"], invalid=["other", None]),
    dict(name="const number", schema={"const": 42}, valid=[42], invalid=[43, "42"]),
    dict(name="minLength", schema={"type": "string", "minLength": 3},
         valid=["abc", "abcdef"], invalid=["", "ab"]),
    dict(name="maxLength", schema={"type": "string", "maxLength": 4},
         valid=["", "abcd"], invalid=["abcde"]),
    dict(name="length range", schema={"type": "string", "minLength": 2, "maxLength": 3},
         valid=["ab", "abc"], invalid=["a", "abcd"]),
    dict(name="pattern anchored", schema={"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"},
         valid=["ABC-12", "XYZ-1234"], invalid=["abc-12", "ABC-1", "ABC-12345", "xABC-12"]),
    dict(name="pattern unanchored", schema={"type": "string", "pattern": "[0-9]+"},
         valid=["abc123", "7", "x1y"], invalid=["abc", ""]),
    dict(name="pattern alternation", schema={"type": "string", "pattern": "^(cat|dog)s?$"},
         valid=["cat", "dogs"], invalid=["cow", "cats!"]),
    dict(name="pattern escapes", schema={"type": "string", "pattern": "^\\d{3}\\.\\w+\\s?$"},
         valid=["123.ab_c", "000.x "], invalid=["12.a", "123.", "123-a"]),
    dict(name="pattern quote", schema={"type": "string", "pattern": "^say \"(hi|yo)\"$"},
         valid=["say \"hi\"", "say \"yo\""], invalid=["say hi"]),
    dict(name="format date", schema={"type": "string", "format": "date"},
         valid=["2024-01-31", "1999-12-01", "2023-02-28"], invalid=["2024-13-01", "2024-1-1", "24-01-01"]),
    dict(name="format date-time", schema={"type": "string", "format": "date-time"},
         valid=["2024-01-31T12:30:00Z", "2024-06-01T00:00:00.123+02:00"],
         invalid=["2024-01-31 12:30:00", "2024-01-31T25:00:00Z", "2024-01-31"]),
    dict(name="format time", schema={"type": "string", "format": "time"},
         valid=["12:30:00Z", "23:59:59+01:00"], invalid=["12:30", "24:00:00Z"]),
    dict(name="format uuid", schema={"type": "string", "format": "uuid"},
         valid=["123e4567-e89b-12d3-a456-426614174000"],
         invalid=["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400"]),
    dict(name="format email", schema={"type": "string", "format": "email"},
         valid=["a.b@example.com", "x+y@mail.co.uk"], invalid=["nobody", "a b"]),
    # ---- numbers
    dict(name="integer range", schema={"type": "integer", "minimum": 1, "maximum": 12},
         valid=[1, 7, 10, 12], invalid=[0, 13, -1, 100]),
    dict(name="integer negative range", schema={"type": "integer", "minimum": -20, "maximum": -3},
         valid=[-20, -15, -3], invalid=[-2, -21, 0, 5]),
    dict(name="integer across zero", schema={"type": "integer", "minimum": -5, "maximum": 250},
         valid=[-5, -1, 0, 9, 99, 199, 250], invalid=[-6, 251, 300, 1000]),
    dict(name="integer lower bound", schema={"type": "integer", "minimum": 18},
         valid=[18, 19, 99, 100, 123456], invalid=[17, 0, -18]),
    dict(name="integer upper bound", schema={"type": "integer", "maximum": 5},
         valid=[5, 0, -1, -1000], invalid=[6, 10, 55]),
    dict(name="integer exclusive", schema={"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
         valid=[1, 9], invalid=[0, 10]),
    dict(name="number range", schema={"type": "number", "minimum": 0, "maximum": 1},
         valid=[0, 0.5, 1, 1.0, 0.999], invalid=[1.5, -0.5, 2]),
    dict(name="number negative", schema={"type": "number", "minimum": -90, "maximum": 90},
         valid=[-90, -45.5, 0, 12.25, 90], invalid=[-90.5, 90.1, 100]),
    dict(name="number lower bound", schema={"type": "number", "minimum": 0},
         valid=[0, 3.5, 1000], invalid=[-1, -0.5]),
    # ---- arrays
    dict(name="array of strings", schema={"type": "array", "items": {"type": "string"}},
         valid=[[], ["a"], ["a", "b", "c"]], invalid=[[1], "a", [None]]),
    dict(name="array bounds", schema={"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
         valid=[[1], [1, 2, 3]], invalid=[[], [1, 2, 3, 4]]),
    dict(name="array min only", schema={"type": "array", "items": {"type": "boolean"}, "minItems": 2},
         valid=[[True, False], [True, True, True]], invalid=[[True]]),
    dict(name="array any items", schema={"type": "array"}, valid=[[], [1, "x", None]], invalid=[{}]),
    dict(name="array empty only", schema={"type": "array", "maxItems": 0}, valid=[[]], invalid=[[1]]),
    dict(name="array of enums", schema={"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2},
         valid=[["x"], ["y", "x"]], invalid=[["z"], ["x", "x", "x"]]),
    # ---- objects
    dict(name="person", schema=PERSON,
         valid=[{"name": "Ann", "age": 30}, {"name": "Bo", "age": 0, "email": "bo@x.org"}],
         invalid=[{"name": "Ann"}, {"age": 3}, {"name": "Ann", "age": 200}, {"name": "A", "age": 1, "x": 1}]),
    dict(name="all optional", schema={"type": "object", "properties": {"a": {"type": "integer"},
                                                                      "b": {"type": "string"}}},
         valid=[{}, {"a": 1}, {"b": "x"}, {"a": 1, "b": "x"}], invalid=[{"a": "1"}, {"b": 2}]),
    dict(name="object any members", schema={"type": "object"},
         valid=[{}, {"k": 1, "l": [None]}], invalid=[[], "x"]),
    dict(name="additionalProperties schema",
         schema={"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                 "additionalProperties": {"type": "string"}},
         valid=[{"id": 1}, {"id": 1, "note": "x"}], invalid=[{"id": 1, "n": 2}, {}]),
    dict(name="additionalProperties true",
         schema={"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": True},
         valid=[{}, {"id": 1, "extra": [1, 2]}], invalid=[{"id": "x"}]),
    dict(name="nested objects", schema={
        "type": "object",
        "properties": {
            "user": {"type": "object", "properties": {
                "id": {"type": "integer"},
                "address": {"type": "object", "properties": {
                    "street": {"type": "string"}, "city": {"type": "string"},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city"], "additionalProperties": False}},
                "required": ["id", "address"], "additionalProperties": False}},
        "required": ["user"], "additionalProperties": False},
        valid=[{"user": {"id": 1, "address": {"city": "Paris"}}},
               {"user": {"id": 2, "address": {"street": "Main", "city": "Oslo", "zip": "12345"}}}],
        invalid=[{"user": {"id": 1, "address": {"zip": "12345"}}},
                 {"user": {"id": 1, "address": {"city": "A", "zip": "1234"}}}]),
    dict(name="array of objects", schema={
        "type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1},
            "price": {"type": "number", "minimum": 0}},
            "required": ["sku", "qty"], "additionalProperties": False}},
        valid=[[], [{"sku": "A1", "qty": 2}, {"sku": "B", "qty": 1, "price": 9.99}]],
        invalid=[[{"sku": "A1", "qty": 0}], [{"qty": 1}]]),
    dict(name="property names needing escapes",
         schema={"type": "object", "properties": {"a b": {"type": "integer"}, "q\"x": {"type": "boolean"}},
                 "required": ["a b", "q\"x"], "additionalProperties": False},
         valid=[{"a b": 1, "q\"x": True}], invalid=[{"a b": 1}]),
    dict(name="empty object only", schema={"type": "object", "additionalProperties": False},
         valid=[{}], invalid=[{"a": 1}]),
    # ---- unions, nullable
    dict(name="type array nullable", schema={"type": ["string", "null"]},
         valid=["x", None], invalid=[1, False]),
    dict(name="nullable keyword (OpenAPI) refused", schema={"type": "integer", "nullable": True},
         error=("unsupported", 'keyword "nullable" at $')),
    dict(name="additionalProperties beside keys", schema={
        "type": "object", "properties": {"id": {"type": "integer"}, "idx": {"type": "integer"}},
        "required": ["id"], "additionalProperties": {"type": "boolean"}},
        valid=[{"id": 1}, {"id": 1, "idx": 2, "i": True, "ids": False, "": True, "x": False}],
        invalid=[{"id": 1, "idx": True}, {"id": 1, "id": True}]),
    dict(name="anyOf", schema={"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
         valid=[5, "ab"], invalid=["abc", None]),
    dict(name="oneOf objects", schema={"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
         "required": ["kind", "r"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
         "required": ["kind", "side"], "additionalProperties": False}]},
        valid=[{"kind": "circle", "r": 1.5}, {"kind": "square", "side": 2}],
        invalid=[{"kind": "circle", "side": 2}, {"kind": "tri"}]),
    dict(name="nullable object member", schema={
        "type": "object", "properties": {"note": {"type": ["string", "null"]}, "n": {"type": ["integer", "null"]}},
        "required": ["note", "n"], "additionalProperties": False},
        valid=[{"note": None, "n": None}, {"note": "x", "n": 2}], invalid=[{"note": 1, "n": None}]),
    # ---- $ref / $defs
    dict(name="ref defs", schema={
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                            "required": ["x", "y"], "additionalProperties": False}},
        "type": "object", "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
        "required": ["from", "to"], "additionalProperties": False},
        valid=[{"from": {"x": 0, "y": 1}, "to": {"x": 2.5, "y": -1}}],
        invalid=[{"from": {"x": 0}, "to": {"x": 1, "y": 1}}]),
    dict(name="ref definitions", schema={
        "definitions": {"color": {"enum": ["r", "g", "b"]}},
        "type": "array", "items": {"$ref": "#/definitions/color"}},
        valid=[["r", "b"]], invalid=[["x"]]),
    dict(name="recursive tree", schema={
        "$defs": {"node": {"type": "object", "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "required": ["value"], "additionalProperties": False}},
        "$ref": "#/$defs/node"},
        valid=[{"value": 1}, {"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4}]}]}],
        invalid=[{"value": 1, "children": [{"children": []}]}, {"value": "x"}]),
    dict(name="recursive root", schema={
        "type": "object", "properties": {"name": {"type": "string"},
                                         "sub": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["name"], "additionalProperties": False},
        valid=[{"name": "a"}, {"name": "a", "sub": [{"name": "b", "sub": []}]}],
        invalid=[{"name": "a", "sub": [{}]}]),
    dict(name="recursive linked list", schema={
        "$defs": {"list": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
            "head": {"type": "integer"}, "tail": {"$ref": "#/$defs/list"}},
            "required": ["head", "tail"], "additionalProperties": False}]}},
        "$ref": "#/$defs/list"},
        valid=[None, {"head": 1, "tail": {"head": 2, "tail": None}}],
        invalid=[{"head": 1}, {"head": 1, "tail": {"head": "x", "tail": None}}]),
    # ---- real-world shapes
    dict(name="sentiment", schema={
        "type": "object", "properties": {
            "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["sentiment", "confidence"], "additionalProperties": False},
        valid=[{"sentiment": "positive", "confidence": 0.93}],
        invalid=[{"sentiment": "happy", "confidence": 0.5}, {"sentiment": "neutral", "confidence": 3}]),
    dict(name="invoice", schema={
        "title": "Invoice", "description": "An invoice extracted from text",
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object", "properties": {
            "invoice_id": {"type": "string", "pattern": "^INV-[0-9]{4,8}$"},
            "issued": {"type": "string", "format": "date"},
            "customer": {"type": "object", "properties": {
                "name": {"type": "string", "minLength": 1},
                "vat": {"type": ["string", "null"]}},
                "required": ["name", "vat"], "additionalProperties": False},
            "lines": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
                "description": {"type": "string"},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 10000},
                "unit_price": {"type": "number", "minimum": 0}},
                "required": ["description", "quantity", "unit_price"], "additionalProperties": False}},
            "currency": {"enum": ["EUR", "USD", "GBP"]},
            "paid": {"type": "boolean"}},
        "required": ["invoice_id", "issued", "customer", "lines", "currency", "paid"],
        "additionalProperties": False},
        valid=[{"invoice_id": "INV-0042", "issued": "2024-03-15",
                "customer": {"name": "ACME", "vat": None},
                "lines": [{"description": "bolts", "quantity": 100, "unit_price": 0.05}],
                "currency": "EUR", "paid": False}],
        invalid=[{"invoice_id": "INV-42", "issued": "2024-03-15", "customer": {"name": "ACME", "vat": None},
                  "lines": [{"description": "b", "quantity": 1, "unit_price": 1}], "currency": "EUR", "paid": False},
                 {"invoice_id": "INV-0042", "issued": "2024-03-15", "customer": {"name": "ACME", "vat": None},
                  "lines": [], "currency": "EUR", "paid": False}]),
    dict(name="event", schema={
        "type": "object", "properties": {
            "id": {"type": "string", "format": "uuid"},
            "at": {"type": "string", "format": "date-time"},
            "level": {"enum": ["debug", "info", "warn", "error"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 5},
            "attrs": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}},
        "required": ["id", "at", "level"], "additionalProperties": False},
        valid=[{"id": "123e4567-e89b-12d3-a456-426614174000", "at": "2024-01-02T03:04:05Z", "level": "info"},
               {"id": "123e4567-e89b-12d3-a456-426614174000", "at": "2024-01-02T03:04:05Z", "level": "warn",
                "tags": ["a", "b"], "attrs": {"k": 1, "v": "x", "ok": True}}],
        invalid=[{"id": "nope", "at": "2024-01-02T03:04:05Z", "level": "info"},
                 {"id": "123e4567-e89b-12d3-a456-426614174000", "at": "2024-01-02T03:04:05Z", "level": "fatal"}]),
    dict(name="tool call", schema={
        "type": "object", "properties": {
            "name": {"enum": ["get_weather", "get_time"]},
            "arguments": {"type": "object", "properties": {
                "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"], "additionalProperties": False}},
        "required": ["name", "arguments"], "additionalProperties": False},
        valid=[{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}],
        invalid=[{"name": "get_weather", "arguments": {}}]),
    dict(name="address book", schema={
        "$defs": {"phone": {"type": "object", "properties": {
            "kind": {"enum": ["home", "work", "mobile"]},
            "number": {"type": "string", "pattern": "^\\+?[0-9 ]{6,20}$"}},
            "required": ["kind", "number"], "additionalProperties": False}},
        "type": "object", "properties": {
            "contacts": {"type": "array", "items": {"type": "object", "properties": {
                "first": {"type": "string"}, "last": {"type": "string"},
                "born": {"type": "string", "format": "date"},
                "phones": {"type": "array", "items": {"$ref": "#/$defs/phone"}, "maxItems": 3}},
                "required": ["first", "last"], "additionalProperties": False}}},
        "required": ["contacts"], "additionalProperties": False},
        valid=[{"contacts": [{"first": "A", "last": "B", "phones": [{"kind": "home", "number": "+33 1 23 45 67"}]}]}],
        invalid=[{"contacts": [{"first": "A", "last": "B", "phones": [{"kind": "fax", "number": "123456"}]}]}]),
    dict(name="product", schema={
        "type": "object", "properties": {
            "productId": {"type": "integer", "minimum": 1},
            "productName": {"type": "string"},
            "price": {"type": "number", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "dimensions": {"type": "object", "properties": {
                "length": {"type": "number"}, "width": {"type": "number"}, "height": {"type": "number"}},
                "required": ["length", "width", "height"], "additionalProperties": False}},
        "required": ["productId", "productName", "price"], "additionalProperties": False},
        valid=[{"productId": 1, "productName": "An ice sculpture", "price": 12.5,
                "tags": ["cold", "ice"], "dimensions": {"length": 7.0, "width": 12.0, "height": 9.5}}],
        invalid=[{"productId": 0, "productName": "x", "price": 1}, {"productId": 1, "productName": "x", "price": -1}]),
    dict(name="classification with reason", schema={
        "type": "object", "properties": {
            "label": {"enum": ["spam", "ham"]}, "reason": {"type": "string", "maxLength": 200}},
        "required": ["label", "reason"], "additionalProperties": False},
        valid=[{"label": "spam", "reason": "mentions a prize"}], invalid=[{"label": "eggs", "reason": ""}]),
    dict(name="annotations ignored", schema={
        "type": "integer", "title": "t", "description": "d", "examples": [1], "default": 1,
        "$comment": "c", "deprecated": False, "readOnly": True, "writeOnly": False},
        valid=[1], invalid=["1"]),
    # ---- errors
    dict(name="unsupported not", schema={"type": "object", "properties": {"a": {"not": {"type": "string"}}}},
         error=("unsupported", 'keyword "not" at $.properties.a')),
    dict(name="unsupported allOf", schema={"allOf": [{"type": "string"}]},
         error=("unsupported", 'keyword "allOf" at $')),
    dict(name="unsupported in items", schema={"type": "array", "items": {"type": "string", "contentEncoding": "b"}},
         error=("unsupported", 'keyword "contentEncoding" at $.items')),
    dict(name="unsupported format", schema={"type": "string", "format": "ipv6"},
         error=("unsupported", 'format "ipv6"')),
    dict(name="unsupported tuple", schema={"type": "array", "items": [{"type": "string"}]},
         error=("unsupported", "tuples")),
    dict(name="unsupported prefixItems", schema={"type": "array", "prefixItems": [{"type": "string"}]},
         error=("unsupported", 'keyword "prefixItems" at $')),
    dict(name="unsupported patternProperties", schema={"type": "object", "patternProperties": {"^x": {}}},
         error=("unsupported", 'keyword "patternProperties"')),
    dict(name="unsupported remote ref", schema={"$ref": "https://example.com/s.json"},
         error=("unsupported", "outside this document")),
    dict(name="unsupported lookahead", schema={"type": "string", "pattern": "^(?=a)b$"},
         error=("unsupported", "lookaround at offset 1")),
    dict(name="unsupported fractional number bound", schema={"type": "number", "minimum": 0.5},
         error=("unsupported", '"minimum" on a number')),
    dict(name="unresolved ref", schema={"$ref": "#/$defs/missing"},
         error=("invalid_arg", "does not resolve")),
    dict(name="bad type", schema={"type": "strng"}, error=("invalid_arg", 'unknown type "strng"')),
    dict(name="bad bounds", schema={"type": "integer", "minimum": 5, "maximum": 1},
         error=("invalid_arg", "between minimum and maximum")),
    dict(name="bad pattern", schema={"type": "string", "pattern": "a("},
         error=("invalid_arg", "missing )")),
    dict(name="huge maxItems", schema={"type": "array", "maxItems": 100000},
         error=("capacity", '"maxItems" above 1000')),
    dict(name="deep nesting", schema=(lambda: (lambda f: f(f, 80))(
        lambda f, n: {"type": "array", "items": f(f, n - 1)} if n else {"type": "string"}))(),
         error=("capacity", "nested more than 64")),
]

# Regular expressions (the `regex` constraint): each string must match the
# grammar exactly when Python's re.fullmatch says it matches.
REGEXES = [
    ("[a-z]+@[a-z]+\\.(com|org)", ["ab@cd.com", "x@y.org", "ab@cd.net", "@cd.com", "AB@cd.com", ""]),
    ("^\\d{3}-\\d{4}$", ["555-1234", "55-1234", "555-12345", "abc-defg"]),
    ("(yes|no|maybe)", ["yes", "no", "maybe", "yesno", "", "Yes"]),
    ("a{2,4}b?", ["aa", "aaaa", "aaab", "a", "aaaaa", "aab", "b"]),
    ("[^aeiou\\s]+", ["xyz", "bcd", "abc", "x y", ""]),
    ("\\w+(\\.\\w+)*", ["a.b.c", "abc", "a..b", ".a", "a_b.c9"]),
    ("-?(0|[1-9]\\d*)(\\.\\d+)?", ["0", "-12.5", "012", "1.", "3.14159", "-0"]),
    ("(?:ab)+c*", ["ab", "ababcc", "abc", "a", "ba"]),
    ("caf\u00e9|\u6771\u4eac+", ["caf\u00e9", "\u6771\u4eac\u4eac", "cafe", "\u6771"]),
    ("x.y", ["xay", "x\u00e9y", "x\ny", "xy"]),
    ("[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}", ["00:1a:2B:3c:4d:5e", "00:1a:2B:3c:4d", "0g:1a:2B:3c:4d:5e"]),
    ("\\(\\d+\\)\\s\\[[A-Z]\\]", ["(12) [Q]", "(12)[Q]", "(x) [Q]"]),
    ("(red|green)? ?(apple|pear)s{0,1}", ["red apple", "pears", " pear", "green apples", "blue apple"]),
    ("[+\\-*/]{1,3}", ["+", "-*/", "+-*/", "a"]),
    ("\\x41\\u00e9\\t", ["A\u00e9\t", "A\u00e9 ", "a\u00e9\t"]),
]
