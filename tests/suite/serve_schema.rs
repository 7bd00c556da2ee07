//! A JSON Schema check for the OpenAPI document of `idem serve`
//! (`docs/reference/serve-openapi.json`), for exactly the keywords the
//! document uses: an unknown keyword fails, so the document cannot say more
//! than the tests check.

use serde_json::Value;

/// A JSON Schema check, for the keywords the document uses: `$ref`,
/// `oneOf`, `const`, `enum`, `type` (one or a list), `properties`,
/// `required`, `additionalProperties`, `items`, `minimum`, `maximum`,
/// `minLength`, `maxLength`, `pattern`, `maxProperties`, `propertyNames`,
/// `not` and `allOf`.
/// An unknown keyword fails, so the document cannot say more than is
/// checked.
pub fn validate(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let object = schema
        .as_object()
        .ok_or(format!("{at}: a schema is an object"))?;
    for keyword in object.keys() {
        let known = [
            "$ref",
            "oneOf",
            "const",
            "enum",
            "type",
            "properties",
            "required",
            "additionalProperties",
            "items",
            "minimum",
            "maximum",
            "minLength",
            "maxLength",
            "pattern",
            "maxProperties",
            "propertyNames",
            "not",
            "allOf",
            "description",
        ];
        if !known.contains(&keyword.as_str()) {
            return Err(format!(
                "{at}: the schema keyword `{keyword}` is not checked"
            ));
        }
    }
    if let Some(r) = schema.get("$ref") {
        let name = r
            .as_str()
            .unwrap()
            .trim_start_matches("#/components/schemas/");
        let target = &doc["components"]["schemas"][name];
        assert!(!target.is_null(), "no schema {name}");
        return validate(doc, target, v, at);
    }
    if let Some(options) = schema.get("oneOf") {
        let matching = options
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| validate(doc, s, v, at).is_ok())
            .count();
        if matching != 1 {
            return Err(format!("{at}: {v} matches {matching} of oneOf, not 1"));
        }
    }
    if let Some(c) = schema.get("const")
        && c != v
    {
        return Err(format!("{at}: {v} is not {c}"));
    }
    if let Some(e) = schema.get("enum")
        && !e.as_array().unwrap().contains(v)
    {
        return Err(format!("{at}: {v} is not one of {e}"));
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().map(|x| x.as_str().unwrap()).collect(),
            _ => panic!("bad type {t}"),
        };
        let fits = types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            "number" => v.is_number(),
            "integer" => v.is_i64() || v.is_u64(),
            other => panic!("unknown type {other}"),
        });
        if !fits {
            return Err(format!("{at}: {v} is not of type {t}"));
        }
    }
    if let (Some(min), Some(n)) = (schema.get("minimum"), v.as_f64())
        && n < min.as_f64().unwrap()
    {
        return Err(format!("{at}: {n} is under {min}"));
    }
    if let (Some(max), Some(n)) = (schema.get("maximum"), v.as_f64())
        && n > max.as_f64().unwrap()
    {
        return Err(format!("{at}: {n} is over {max}"));
    }
    if let Some(text) = v.as_str() {
        let chars = text.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && chars < min
        {
            return Err(format!("{at}: {v} is shorter than {min}"));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && chars > max
        {
            return Err(format!("{at}: {v} is longer than {max}"));
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
            // ECMA-262 and Rust's regex agree on the classes the document
            // uses (`\S`, `[^\u0000-\u001f]`, `{64}`).
            let re = regex::Regex::new(pattern)
                .unwrap_or_else(|e| panic!("{at}: the pattern {pattern} does not compile: {e}"));
            if !re.is_match(text) {
                return Err(format!("{at}: {v} does not match {pattern}"));
            }
        }
    }
    for part in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        validate(doc, part, v, at)?;
    }
    if let (Some(names), Some(members)) = (schema.get("propertyNames"), v.as_object()) {
        for name in members.keys() {
            validate(
                doc,
                names,
                &Value::String(name.clone()),
                &format!("{at} (name {name:?})"),
            )?;
        }
    }
    if let Some(not) = schema.get("not")
        && validate(doc, not, v, at).is_ok()
    {
        return Err(format!("{at}: {v} matches what `not` excludes ({not})"));
    }
    if let (Some(max), Some(members)) = (
        schema.get("maxProperties").and_then(Value::as_u64),
        v.as_object(),
    ) && members.len() as u64 > max
    {
        return Err(format!("{at}: {v} has more than {max} members"));
    }
    if let Some(members) = v.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = required.as_str().unwrap();
            if !members.contains_key(name) {
                return Err(format!("{at}: the member `{name}` is missing from {v}"));
            }
        }
        for (name, value) in members {
            let at = format!("{at}.{name}");
            match properties.and_then(|p| p.get(name)) {
                Some(s) => validate(doc, s, value, &at)?,
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        return Err(format!("{at}: not a documented member"));
                    }
                    Some(s @ Value::Object(_)) => validate(doc, s, value, &at)?,
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(elements)) = (schema.get("items"), v.as_array()) {
        for (i, e) in elements.iter().enumerate() {
            validate(doc, items, e, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}
