//! The JSON functions: registered in a session (with the `->` and `->>` operators and the
//! rewrite of `CAST(json_get(...) AS type)` into the function that reads that type), and their
//! reference text, which the crate does not document itself.

use datafusion::execution::context::SessionState;
use datafusion::logical_expr::{DocSection, Documentation};

/// The group the JSON functions are listed in, and what holds for all of them.
pub(crate) const SECTION: DocSection = DocSection {
    include: true,
    label: "JSON Functions",
    description: Some(
        "Values read out of JSON text, such as a log body or an attribute value, by a path: \
after the JSON argument, each key is a string (an object's key) or an integer (an array's \
index, negative from the end), so `json_get_str(body, 'user', 'name')` reads `name` in \
`user`; `body -> 'user'` is `json_get(body, 'user')` and `body ->> 'user'` is \
`json_as_text(body, 'user')` (they bind more tightly than comparisons and `||`: \
`body ->> 'level' = 'error'` compares the level). **Bad input gives NULL, never an error:** \
text that is not JSON, a missing key or index, a value of another type than the function \
reads, a value nested more than 200 levels deep, and a NULL value give NULL (`json_contains` \
gives false), so no record fails its batch (an untyped `NULL` literal is refused when \
planning: it is not text). The text is read per call as far as the value and no further, \
without building a tree: what follows the value is not checked, and a value near the start \
of a large body is cheap to read. A JSON value (`json_get`, `->`) written to an attribute keeps its type: an \
integer becomes an int attribute, a float a double, a boolean a bool, a string a string, an \
array or object its JSON text, and a JSON null removes the attribute.",
    ),
};

/// Adds the JSON functions, the `->` and `->>` operators and the rewrite of casts of
/// `json_get` to `state`.
pub(crate) fn register(state: &mut SessionState) {
    // A session state's registry only inserts into its maps, so registering cannot fail; were
    // it to, the functions would be unknown and `check` would say so where they are called.
    let _ = datafusion_functions_json::register_all(state);
}

/// The reference text of the JSON function `name` (its registered name), if it is one.
pub(crate) fn documentation(name: &str) -> Option<Documentation> {
    let (syntax, description) = match name {
        "json_get" => (
            "json_get(json, key[, ...])",
            "The value at the path, of whatever JSON type it is (a union of null, boolean, \
integer, float, string, array and object; arrays and objects as their JSON text); `json -> key` \
calls it. Written to an attribute it keeps its type; compared with a literal it is read as the \
literal's type; `CAST(json_get(...) AS BIGINT)` (or DOUBLE, BOOLEAN, VARCHAR) reads that type \
directly, as the typed functions do.",
        ),
        "json_get_str" => (
            "json_get_str(json, key[, ...])",
            "The string at the path, unquoted and unescaped; NULL when the value is not a JSON \
string (a number is not converted: `json_as_text` reads any value as text).",
        ),
        "json_get_int" => (
            "json_get_int(json, key[, ...])",
            "The integer at the path, as a BIGINT: a JSON integer, a number with an integral \
value (`2.0`, `2e3`) or a string that spells an integer (`\"42\"`); NULL for anything else, \
a fraction (never rounded) or an integer beyond BIGINT included.",
        ),
        "json_get_float" => (
            "json_get_float(json, key[, ...])",
            "The number at the path, as a DOUBLE: a JSON number or a string that spells one; \
NULL for anything else.",
        ),
        "json_get_bool" => (
            "json_get_bool(json, key[, ...])",
            "The boolean at the path: `true`, `false`, or a string `\"true\"` or `\"false\"`; \
NULL for anything else.",
        ),
        "json_get_json" => (
            "json_get_json(json, key[, ...])",
            "The value at the path as its JSON text, exactly as written (a string keeps its \
quotes and escapes).",
        ),
        "json_get_array" => (
            "json_get_array(json, key[, ...])",
            "The array at the path as a list of the JSON text of its elements; NULL when the \
value is not an array.",
        ),
        "json_as_text" => (
            "json_as_text(json, key[, ...])",
            "The value at the path as text: a string unquoted and unescaped, a number, boolean, \
array or object as its JSON text, a JSON null as NULL; `json ->> key` calls it.",
        ),
        "json_length" => (
            "json_length(json[, key, ...])",
            "The number of elements of the array, or of keys of the object, at the path (the \
whole document without one), as a BIGINT UNSIGNED; NULL for any other value.",
        ),
        "json_contains" => (
            "json_contains(json, key[, ...])",
            "Whether the path exists (its value may be a JSON null); false, never NULL, for \
text that is not JSON and for a NULL argument.",
        ),
        "json_object_keys" => (
            "json_object_keys(json[, key, ...])",
            "The keys of the object at the path (the whole document without one) as a list, \
in order; NULL for any other value.",
        ),
        "json_from_scalar" => (
            "json_from_scalar(value)",
            "A SQL boolean, number, string or NULL as a JSON value, the type `json_get` gives.",
        ),
        "json_union_to_text" => (
            "json_union_to_text(json_value)",
            "A JSON value (what `json_get` gives) as its JSON text: a string quoted, a JSON \
null as NULL.",
        ),
        _ => return None,
    };
    Some(Documentation::builder(SECTION, description, syntax).build())
}
