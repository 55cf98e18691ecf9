"""tests/service/openapi.py - a small OpenAPI 3.0 response validator.

Loads docs/openapi.yaml (with PyYAML: Debian's python3-yaml, installed by
scripts/setup.sh) and checks a response - method, path, status, headers,
body - against it: the status must be documented for the operation (or be
one of the errors any request can get), required headers must be present
and match their schema, the Content-Type must be one the response declares,
and a JSON body must be strict JSON (UTF-8, no NaN, no duplicate keys) that
matches the schema.  The subset of JSON Schema implemented is the one the
spec uses: $ref, allOf/anyOf/oneOf, type, nullable, enum, minimum/maximum
(exclusive* as booleans, OpenAPI 3.0), multipleOf, pattern, min/maxLength,
min/maxItems, properties, required, additionalProperties, items.  Two
extensions: `x-tessera-json` on a string schema (the string is JSON text
that must match the schema it names, e.g. the `info` of A1111's answers),
and the top-level `x-tessera-path-prefixes` table (the error responses of
unknown paths and wrong methods under a prefix, e.g. OpenAI's shape under
/v1/images/).
"""
import json
import re

try:
    import yaml
except ImportError as e:  # pragma: no cover - a setup problem, said plainly
    raise SystemExit("tests/service needs PyYAML (Debian: python3-yaml; scripts/setup.sh "
                     "installs it): %s" % e)

# Errors any request can get whatever its path or method (the spec's
# description says so): malformed request, oversized body, request line or
# headers.
GLOBAL_ERRORS = {400: "BadRequest", 413: "PayloadTooLarge", 414: "UriTooLong",
                 431: "HeadersTooLarge"}


class SpecViolation(AssertionError):
    pass


def _strict_json(body):
    def pairs(items):
        d = {}
        for k, v in items:
            if k in d:
                raise ValueError("duplicate key %r" % k)
            d[k] = v
        return d

    def bad_constant(name):
        raise ValueError("non-JSON number %s" % name)

    text = body.decode("utf-8")  # raises on invalid UTF-8
    return json.loads(text, object_pairs_hook=pairs, parse_constant=bad_constant)


class Spec:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.doc = yaml.safe_load(f)
        self.routes = []
        for tpl, item in self.doc["paths"].items():
            rx = ""
            for part in re.split(r"(\{[^}]+\})", tpl):
                if part.startswith("{"):
                    rx += "(?P<%s>[^/]+?)" % part[1:-1]
                else:
                    rx += re.escape(part)
            n_params = tpl.count("{")
            self.routes.append((n_params, tpl, re.compile("^" + rx + "$"), item))
        self.routes.sort(key=lambda r: r[0])  # literal paths win over templates

    # --- lookups ---------------------------------------------------------
    def deref(self, node):
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            assert ref.startswith("#/"), ref
            target = self.doc
            for part in ref[2:].split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    def match(self, path):
        path = path.split("?", 1)[0]
        for _, tpl, rx, item in self.routes:
            m = rx.match(path)
            if m:
                return tpl, item, m.groupdict()
        return None

    def operation(self, method, path):
        m = self.match(path)
        if not m:
            return None, None
        tpl, item, _ = m
        return tpl, item.get(method.lower())

    def schema(self, name):
        return self.doc["components"]["schemas"][name]

    def events(self, path, method="GET"):
        """The x-tessera-events table (event name -> schema) of an operation."""
        tpl, op = self.operation(method, path)
        if not op or "x-tessera-events" not in op:
            raise SpecViolation("no SSE events documented for %s %s" % (method, path))
        return op["x-tessera-events"]

    def prefix_response(self, path, status):
        """(prefix, response) of x-tessera-path-prefixes for a path that no
        route matches or a method the path does not take; None if none."""
        path = path.split("?", 1)[0]
        best = None
        for key, responses in (self.doc.get("x-tessera-path-prefixes") or {}).items():
            # a key ending in "/" is a prefix, any other an exact path
            hit = path.startswith(key) if key.endswith("/") else path == key
            if hit and (best is None or path == key or
                        (best[0] != path and len(key) > len(best[0]))):
                best = (key, responses)
        if best is None or str(status) not in best[1]:
            return None
        return best[0], self.deref(best[1][str(status)])

    def metrics(self):
        return self.doc["paths"]["/metrics"]["get"]["x-tessera-metrics"]

    # --- schema validation -----------------------------------------------
    def check_event(self, schemas, name, data, where, shown=None):
        """An event stream's event `name` with its parsed `data` against the
        operation's x-tessera-events table (Spec.events); raises
        SpecViolation naming `where` (and `shown`, the event as printed)."""
        schema = schemas.get(name)
        if schema is None:
            raise SpecViolation("%s: event %r not in the spec (%s)" % (where, name,
                                                                       sorted(schemas)))
        errs = self.check(schema, data, "event %s" % name)
        if errs:
            raise SpecViolation("%s: event %r violates the spec: %s"
                                % (where, name if shown is None else shown, errs))

    def check(self, schema, value, where="$"):
        """List of problems of `value` against `schema` (empty = valid)."""
        errs = []
        self._check(schema, value, where, errs)
        return errs

    def _check(self, schema, v, where, errs):
        s = self.deref(schema)
        if v is None:
            if not s or s.get("nullable") or any(self.deref(x).get("nullable")
                                                  for x in s.get("allOf", [])):
                return
            errs.append("%s: null not allowed" % where)
            return
        for sub in s.get("allOf", []):
            self._check(sub, v, where, errs)
        if "anyOf" in s:
            if not any(not self.check(sub, v, where) for sub in s["anyOf"]):
                errs.append("%s: matches none of anyOf" % where)
        if "oneOf" in s:
            n = sum(1 for sub in s["oneOf"] if not self.check(sub, v, where))
            if n != 1:
                errs.append("%s: matches %d of oneOf (want 1)" % (where, n))
        t = s.get("type")
        if t is not None:
            ok = {
                "integer": isinstance(v, int) and not isinstance(v, bool),
                "number": isinstance(v, (int, float)) and not isinstance(v, bool),
                "string": isinstance(v, str),
                "boolean": isinstance(v, bool),
                "array": isinstance(v, list),
                "object": isinstance(v, dict),
            }[t]
            if not ok:
                errs.append("%s: %s is not of type %s" % (where, _short(v), t))
                return
        if "enum" in s and v not in s["enum"]:
            errs.append("%s: %s not in %s" % (where, _short(v), s["enum"]))
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if "minimum" in s:
                if v < s["minimum"] or (s.get("exclusiveMinimum") and v == s["minimum"]):
                    errs.append("%s: %s below minimum %s" % (where, v, s["minimum"]))
            if "maximum" in s:
                if v > s["maximum"] or (s.get("exclusiveMaximum") and v == s["maximum"]):
                    errs.append("%s: %s above maximum %s" % (where, v, s["maximum"]))
            if "multipleOf" in s and v % s["multipleOf"] != 0:
                errs.append("%s: %s not a multiple of %s" % (where, v, s["multipleOf"]))
        if isinstance(v, str):
            if "pattern" in s and not re.search(s["pattern"], v):
                errs.append("%s: %s does not match /%s/" % (where, _short(v), s["pattern"]))
            if len(v) < s.get("minLength", 0):
                errs.append("%s: shorter than %d" % (where, s["minLength"]))
            if "maxLength" in s and len(v) > s["maxLength"]:
                errs.append("%s: longer than %d" % (where, s["maxLength"]))
            if "x-tessera-json" in s:
                try:
                    inner = _strict_json(v.encode("utf-8"))
                except ValueError as e:
                    errs.append("%s: not strict JSON text (%s): %s" % (where, e, _short(v)))
                else:
                    self._check(s["x-tessera-json"], inner, where + "<json>", errs)
        if isinstance(v, list):
            if len(v) < s.get("minItems", 0):
                errs.append("%s: fewer than %d items" % (where, s["minItems"]))
            if "maxItems" in s and len(v) > s["maxItems"]:
                errs.append("%s: more than %d items" % (where, s["maxItems"]))
            if "items" in s:
                for i, item in enumerate(v):
                    self._check(s["items"], item, "%s[%d]" % (where, i), errs)
        if isinstance(v, dict):
            props = s.get("properties", {})
            for k in s.get("required", []):
                if k not in v:
                    errs.append("%s: missing required field %r" % (where, k))
            for k, item in v.items():
                if k in props:
                    self._check(props[k], item, "%s.%s" % (where, k), errs)
                else:
                    ap = s.get("additionalProperties", True)
                    if ap is False:
                        # allOf siblings may declare it
                        declared = any(k in self.deref(x).get("properties", {})
                                       for x in s.get("allOf", []))
                        if not declared:
                            errs.append("%s: field %r not in the spec" % (where, k))
                    elif isinstance(ap, dict):
                        self._check(ap, item, "%s.%s" % (where, k), errs)

    def check_header_value(self, schema, value):
        s = self.deref(schema)
        if s.get("type") == "integer":
            if not re.fullmatch(r"[0-9]+", value.strip()):
                return ["%r is not an integer" % value]
            return self.check(s, int(value.strip()))
        return self.check(s, value)

    # --- responses -------------------------------------------------------
    def response_spec(self, method, path, status):
        """(description of where it came from, response object) or raises."""
        m = self.match(path)
        responses = self.doc["components"]["responses"]
        if m is None:
            if method == "OPTIONS" and status == 204:
                return "CORS preflight", {"description": "preflight"}
            pr = self.prefix_response(path, status)
            if pr:
                return "unknown path under %s" % pr[0], pr[1]
            if status == 404:
                return "unknown path", responses["NotFound"]
            if status in GLOBAL_ERRORS:
                return "any request", responses[GLOBAL_ERRORS[status]]
            raise SpecViolation("%s %s: status %d for a path the spec does not know (want 404)"
                                % (method, path, status))
        tpl, item, _ = m
        if method == "OPTIONS" and status == 204:
            return "CORS preflight", {"description": "preflight"}
        op = item.get("get" if method == "HEAD" else method.lower())
        if op is None:
            pr = self.prefix_response(path, status)
            if pr:
                return "wrong method under %s" % pr[0], pr[1]
            if status == 405:
                return "wrong method", responses["MethodNotAllowed"]
            if status == 401:
                return "wrong method (auth first)", responses["Unauthorized"]
            if status in GLOBAL_ERRORS:
                return "any request", responses[GLOBAL_ERRORS[status]]
            raise SpecViolation("%s %s: status %d for a method %s does not take (want 405)"
                                % (method, path, status, tpl))
        r = op["responses"].get(str(status))
        if r is None and status in GLOBAL_ERRORS:
            return "any request", responses[GLOBAL_ERRORS[status]]
        if r is None:
            r = op["responses"].get("default")
        if r is None:
            raise SpecViolation("%s %s: status %d is not documented for %s %s (documented: %s)"
                                % (method, path, status, method, tpl,
                                   ", ".join(sorted(op["responses"]))))
        return "%s %s" % (method, tpl), self.deref(r)

    def validate_response(self, method, path, status, headers, body):
        """headers: dict of lower-case name -> value.  Raises SpecViolation
        listing every problem; returns the parsed JSON body (or None)."""
        where, r = self.response_spec(method, path, status)
        problems = []
        for name, h in (r.get("headers") or {}).items():
            h = self.deref(h)
            value = headers.get(name.lower())
            if value is None:
                if h.get("required"):
                    problems.append("missing header %s" % name)
                continue
            for p in self.check_header_value(h.get("schema", {}), value):
                problems.append("header %s: %s" % (name, p))
        content = r.get("content")
        parsed = None
        if not content:
            if body and method != "HEAD":
                problems.append("body of %d bytes where the spec has none" % len(body))
        else:
            ctype = headers.get("content-type")
            media = None
            if ctype is None:
                problems.append("no Content-Type (want one of %s)" % list(content))
            else:
                got = _media(ctype)
                for declared in content:
                    if _media(declared) == got or (
                            _media(declared)[0] == got[0] and not _media(declared)[1]):
                        media = declared
                        break
                if media is None:
                    problems.append("Content-Type %r, the spec has %s" % (ctype, list(content)))
            if method == "HEAD":
                if body:
                    problems.append("HEAD answered with a body of %d bytes" % len(body))
            elif media and _media(media)[0] == "application/json":
                try:
                    parsed = _strict_json(body)
                except (UnicodeDecodeError, ValueError) as e:
                    problems.append("body is not strict JSON (%s): %r" % (e, body[:200]))
                else:
                    problems += self.check(content[media].get("schema", {}), parsed)
            elif media == "image/png" and method != "HEAD":
                if not body.startswith(b"\x89PNG\r\n\x1a\n"):
                    problems.append("body is not a PNG: %r" % body[:16])
        if problems:
            raise SpecViolation("%s %s -> %d (%s) violates docs/openapi.yaml:\n  %s\n  body: %r"
                                % (method, path[:200], status, where, "\n  ".join(problems),
                                   body[:300]))
        return parsed


def _media(ctype):
    parts = [p.strip() for p in ctype.split(";")]
    params = tuple(sorted(p.replace(" ", "").lower() for p in parts[1:]
                          if p and not p.lower().startswith("charset=")))
    return parts[0].lower(), params


def _short(v):
    r = repr(v)
    return r if len(r) < 80 else r[:77] + "..."
