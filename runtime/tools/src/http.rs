//! The `http.*` tools: one request, its response as `{ status, headers, body }`, and failures
//! classified by whether another attempt may succeed.
//!
//! Redirects: `http.get` follows up to 10 (the `Authorization` header is dropped when one leads
//! to another host); `http.post`, `http.put` and `http.delete` follow none and return the 3xx
//! response as their result, because re-sending an effect to another address, or turning it
//! into a GET as a 303 asks, is a decision for the flow, not for the host.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use reel_flowspec::ToolKind;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Method, Url, redirect};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::{RESULT_LIMIT, ToolCall, ToolError, ToolOutput, codes};
use crate::args::Args;
use crate::text::{Secrets, clip, duration};

/// The HTTP clients one host shares between all calls, each built when first needed: loading
/// the TLS roots is the slow part of starting, and a flow without HTTP should not pay for it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Clients {
    /// For `http.get`: follows redirects.
    follow: Arc<OnceLock<Result<Client, String>>>,
    /// For effects: returns 3xx responses as they are.
    no_follow: Arc<OnceLock<Result<Client, String>>>,
}

impl Clients {
    /// The client for `method`, or why it cannot be set up.
    fn get(&self, method: &Method, tool: &str) -> Result<&Client, ToolError> {
        let (cell, policy) = if *method == Method::GET {
            (&self.follow, redirect::Policy::limited(10))
        } else {
            (&self.no_follow, redirect::Policy::none())
        };
        let built = cell.get_or_init(|| {
            Client::builder()
                .user_agent(concat!("reel/", env!("CARGO_PKG_VERSION")))
                .redirect(policy)
                .build()
                .map_err(|e| chain(&e))
        });
        built.as_ref().map_err(|why| {
            ToolError::new(
                codes::HTTP_CLIENT,
                format!(
                    "`{tool}` cannot run: the HTTP client could not be set up ({why}); check the \
                     system's TLS root certificates"
                ),
                false,
            )
        })
    }
}

/// The method of an `http.*` tool, or `None` for any other name.
pub(crate) fn method(tool: &str) -> Option<Method> {
    match tool {
        "http.get" => Some(Method::GET),
        "http.post" => Some(Method::POST),
        "http.put" => Some(Method::PUT),
        "http.delete" => Some(Method::DELETE),
        _ => None,
    }
}

/// Performs one request.
pub(crate) async fn call(
    clients: &Clients,
    method: Method,
    call: &ToolCall,
    secrets: &Secrets,
    cancel: &CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let args = Args::new(&call.tool, &call.args, secrets);
    let url = build_url(&args)?;
    let mut headers = build_headers(&args)?;
    if let Some(token) = args.opt_string("bearer")? {
        if headers.contains_key(AUTHORIZATION) {
            return Err(ToolError::new(
                codes::ARGS,
                format!(
                    "`{}` has both `bearer` and an `Authorization` header; keep one",
                    call.tool
                ),
                false,
            ));
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            ToolError::new(
                codes::ARGS,
                "argument `bearer` holds a character a header cannot carry (a line break or \
                 control character); check the secret's value",
                false,
            )
        })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    // A key the flow set itself in `headers` is kept: the flow asked for it.
    if call.kind == ToolKind::Effect
        && let Some(key) = &call.idempotency_key
        && !headers.contains_key("idempotency-key")
    {
        let value = HeaderValue::from_str(key).map_err(|_| {
            ToolError::new(
                codes::ARGS,
                "the idempotency key cannot be sent as a header",
                false,
            )
        })?;
        headers.insert(HeaderName::from_static("idempotency-key"), value);
    }
    let body = build_body(&args, &method, &mut headers)?;

    let client = clients.get(&method, &call.tool)?;
    let shown = format!("{} {}", call.tool, clip(&secrets.text(url.as_str()), 300));
    let mut request = client.request(method, url).headers(headers);
    if let Some(body) = body {
        request = request.body(body);
    }
    let exchange = async {
        let mut response = request.send().await.map_err(Failed::Transport)?;
        let status = response.status();
        let headers = response_headers(response.headers());
        let is_json = is_json(response.headers());
        let charset = charset(response.headers());
        // Read a piece at a time, so that a body past the limit is refused when it gets there
        // (or at once, when its length says so) rather than held whole first.
        if response
            .content_length()
            .is_some_and(|n| n > RESULT_LIMIT as u64)
        {
            return Err(Failed::TooLarge);
        }
        let mut body = Vec::new();
        while let Some(piece) = response.chunk().await.map_err(Failed::Transport)? {
            if body.len() + piece.len() > RESULT_LIMIT {
                return Err(Failed::TooLarge);
            }
            body.extend_from_slice(&piece);
        }
        let (text, _, _) = charset.decode(&body);
        Ok((status, headers, is_json, text.into_owned()))
    };
    let deadline = async {
        match call.timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let (status, headers, is_json, text) = tokio::select! {
        biased;
        _ = cancel.cancelled() => {
            return Err(ToolError::new(
                codes::CANCELED,
                format!("{shown} was canceled before its response arrived"),
                false,
            ));
        }
        _ = deadline => return Err(timeout_error(&shown, call.timeout)),
        result = exchange => result.map_err(|failed| match failed {
            Failed::Transport(e) => transport_error(&shown, call.timeout, &e),
            Failed::TooLarge => ToolError::new(
                codes::HTTP_RESPONSE,
                format!(
                    "{shown} answered with a body longer than {} MiB, more than a result may \
                     hold; ask for less (a page, a filter), or have a command download it to \
                     a file",
                    RESULT_LIMIT >> 20
                ),
                false,
            ),
        })?,
    };
    let body = if is_json {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    } else {
        Value::String(text)
    };
    let body = secrets.value(body);
    let result = json!({ "status": status.as_u16(), "headers": headers, "body": body });
    let code = status.as_u16();
    if code < 400 {
        return Ok(ToolOutput {
            value: result,
            log: String::new(),
        });
    }
    let retryable = code == 408 || code == 429 || code >= 500;
    let hint = match code {
        401 | 403 => "check the credentials (`bearer`, `headers`)",
        404 | 410 => "check the url",
        405 => "check the method (the tool) for this url",
        400 | 409 | 415 | 422 => "check the request body, query and headers",
        _ if retryable => "the call may be retried",
        _ => "see the response in the error's cause",
    };
    let snippet = match &body {
        Value::String(s) if s.trim().is_empty() => String::new(),
        Value::String(s) => format!(": {}", clip(s.trim(), 300)),
        other => format!(": {}", clip(&other.to_string(), 300)),
    };
    Err(ToolError {
        cause: Some(result),
        ..ToolError::new(
            codes::HTTP_STATUS,
            format!("{shown} answered {status}; {hint}{snippet}"),
            retryable,
        )
    })
}

/// The `url` argument with `query` appended.
fn build_url(args: &Args) -> Result<Url, ToolError> {
    let text = args.string("url")?;
    let bad = |why: String| {
        ToolError::new(
            codes::HTTP_URL,
            format!(
                "argument `url` \"{}\" is not a usable URL ({why}); write an absolute http:// or \
                 https:// URL",
                clip(&args.secrets().text(text), 300)
            ),
            false,
        )
    };
    let mut url = Url::parse(text).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!(
            "the scheme `{}` is not http or https",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host".to_string()));
    }
    let query = args.string_map("query")?;
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(query);
    }
    Ok(url)
}

/// The `headers` argument as a header map.
fn build_headers(args: &Args) -> Result<HeaderMap, ToolError> {
    let mut map = HeaderMap::new();
    for (name, value) in args.string_map("headers")? {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            ToolError::new(
                codes::ARGS,
                format!("argument `headers` has `{name}`, which is not a valid header name"),
                false,
            )
        })?;
        let value = HeaderValue::from_str(value).map_err(|_| {
            ToolError::new(
                codes::ARGS,
                format!(
                    "argument `headers` has a value for `{name}` that a header cannot carry (a \
                     line break or control character)"
                ),
                false,
            )
        })?;
        map.append(header, value);
    }
    Ok(map)
}

/// The request body from `json` or `body`, with a content type unless `headers` gave one.
fn build_body(
    args: &Args,
    method: &Method,
    headers: &mut HeaderMap,
) -> Result<Option<Vec<u8>>, ToolError> {
    let json = args.optional("json");
    let text = args.opt_string("body")?;
    let (bytes, content_type) = match (json, text) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(ToolError::new(
                codes::ARGS,
                "give `json` or `body`, not both",
                false,
            ));
        }
        _ if *method == Method::GET => {
            return Err(ToolError::new(
                codes::ARGS,
                "`http.get` sends no body; move the data to `query`, or use http.post",
                false,
            ));
        }
        (Some(json), None) => (json.to_string().into_bytes(), "application/json"),
        (None, Some(text)) => (text.as_bytes().to_vec(), "text/plain; charset=utf-8"),
    };
    if !headers.contains_key(CONTENT_TYPE) {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    Ok(Some(bytes))
}

/// Response headers by lowercase name; repeated headers joined with `, `.
fn response_headers(headers: &HeaderMap) -> Map<String, Value> {
    let mut map = Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match map.get_mut(name.as_str()) {
            Some(Value::String(previous)) => {
                previous.push_str(", ");
                previous.push_str(&value);
            }
            _ => {
                map.insert(name.as_str().to_string(), Value::String(value));
            }
        }
    }
    map
}

/// Whether the response says its body is JSON (`application/json` or `…+json`).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Why an exchange gave no response to return.
enum Failed {
    /// Below HTTP: no connection, too many redirects, a broken exchange.
    Transport(reqwest::Error),
    /// The body was longer than [`RESULT_LIMIT`].
    TooLarge,
}

/// The encoding a response's `Content-Type` names (`charset=`), UTF-8 when it names none or
/// one unknown, as reqwest's own `text()` decodes.
fn charset(headers: &HeaderMap) -> &'static encoding_rs::Encoding {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split(';')
                .skip(1)
                .filter_map(|p| p.trim().split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("charset"))
                .and_then(|(_, label)| {
                    encoding_rs::Encoding::for_label(label.trim().trim_matches('"').as_bytes())
                })
        })
        .unwrap_or(encoding_rs::UTF_8)
}

fn timeout_error(shown: &str, limit: Option<Duration>) -> ToolError {
    ToolError::new(
        codes::HTTP_TIMEOUT,
        format!(
            "{shown} got no complete response within its timeout of {}; raise the step's \
             `timeout` if the service is slow",
            duration(limit.unwrap_or_default())
        ),
        true,
    )
}

/// Classifies a failure below HTTP: no connection, too many redirects, or a broken exchange.
fn transport_error(shown: &str, limit: Option<Duration>, error: &reqwest::Error) -> ToolError {
    let why = chain(error);
    if error.is_timeout() {
        timeout_error(shown, limit)
    } else if error.is_redirect() {
        ToolError::new(
            codes::HTTP_REDIRECT,
            format!("{shown} was redirected too often ({why}); point `url` at the final address"),
            false,
        )
    } else if error.is_builder() {
        ToolError::new(
            codes::HTTP_URL,
            format!("{shown} cannot be sent: {why}"),
            false,
        )
    } else if error.is_connect() {
        ToolError::new(
            codes::HTTP_CONNECT,
            format!(
                "{shown} could not connect: {why}; check the host and port and that the service runs"
            ),
            true,
        )
    } else {
        ToolError::new(
            codes::HTTP_CONNECT,
            format!("{shown} failed during the exchange: {why}"),
            true,
        )
    }
}

/// An error with its sources, `outer: inner: innermost`, without repeating a source's text.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::path::PathBuf;
    use std::sync::mpsc;
    use std::time::Instant;

    use super::*;
    use crate::ToolHost;

    /// What the test server saw of one request.
    #[derive(Debug)]
    struct Seen {
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    /// A response the test server sends.
    struct Reply {
        status: u16,
        content_type: &'static str,
        body: String,
        delay: Duration,
    }

    fn reply(status: u16, content_type: &'static str, body: &str) -> Reply {
        Reply {
            status,
            content_type,
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }

    /// Serves every request with `respond` on 127.0.0.1; gives the base URL and what it saw.
    fn serve(respond: fn(&Seen) -> Reply) -> (String, mpsc::Receiver<Seen>) {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for mut request in server.incoming_requests() {
                let mut body = String::new();
                let _ = request.as_reader().read_to_string(&mut body);
                let seen = Seen {
                    method: request.method().to_string(),
                    url: request.url().to_string(),
                    headers: request
                        .headers()
                        .iter()
                        .map(|h| (h.field.to_string(), h.value.to_string()))
                        .collect(),
                    body,
                };
                let answer = respond(&seen);
                let _ = tx.send(seen);
                std::thread::spawn(move || {
                    std::thread::sleep(answer.delay);
                    let header =
                        tiny_http::Header::from_bytes("Content-Type", answer.content_type).unwrap();
                    let response = tiny_http::Response::from_string(answer.body)
                        .with_status_code(answer.status)
                        .with_header(header)
                        .with_header(tiny_http::Header::from_bytes("X-Trace", "t-1").unwrap());
                    let _ = request.respond(response);
                });
            }
        });
        (format!("http://127.0.0.1:{port}"), rx)
    }

    /// Serves every request, each on a thread of its own, with `respond` as it is, for a
    /// response `serve` cannot make; gives the base URL.
    fn serve_raw(respond: fn(tiny_http::Request)) -> String {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        std::thread::spawn(move || {
            for request in server.incoming_requests() {
                std::thread::spawn(move || respond(request));
            }
        });
        format!("http://127.0.0.1:{port}")
    }

    fn http(tool: &str, args: Value) -> ToolCall {
        ToolCall {
            tool: tool.to_string(),
            kind: if tool == "http.get" {
                ToolKind::Read
            } else {
                ToolKind::Effect
            },
            args: args.as_object().cloned().unwrap_or_default(),
            idempotency_key: (tool != "http.get").then(|| "idem-1".to_string()),
            run_dir: PathBuf::from("/"),
            env: Default::default(),
            user: None,
            timeout: Some(Duration::from_secs(10)),
            secrets: Default::default(),
        }
    }

    async fn run(call: ToolCall) -> Result<ToolOutput, ToolError> {
        ToolHost::new().call(call, CancellationToken::new()).await
    }

    fn json_ok(_: &Seen) -> Reply {
        reply(
            200,
            "application/json; charset=utf-8",
            r#"{"items": [1, 2]}"#,
        )
    }

    #[tokio::test]
    async fn get_parses_json_and_sends_query_headers_and_bearer() {
        let (base, seen) = serve(json_ok);
        let mut call = http(
            "http.get",
            json!({"url": format!("{base}/data?fixed=1"), "query": {"q": "a b", "n": "2"},
                   "headers": {"X-Custom": "yes"}, "bearer": "tok-abc"}),
        );
        call.secrets = vec![("api".to_string(), "tok-abc".to_string())].into();
        let out = run(call).await.unwrap();
        assert_eq!(out.value["status"], 200);
        assert_eq!(out.value["body"], json!({"items": [1, 2]}));
        assert_eq!(out.value["headers"]["x-trace"], "t-1");
        assert_eq!(out.log, "");
        let seen = seen.recv().unwrap();
        assert_eq!(seen.method, "GET");
        assert_eq!(seen.url, "/data?fixed=1&n=2&q=a+b");
        assert_eq!(seen.header("x-custom"), Some("yes"));
        assert_eq!(seen.header("authorization"), Some("Bearer tok-abc"));
        assert_eq!(seen.header("idempotency-key"), None);
    }

    #[tokio::test]
    async fn text_bodies_stay_strings() {
        fn text(_: &Seen) -> Reply {
            reply(200, "text/plain", "{\"looks\": \"like json\"}")
        }
        let (base, _seen) = serve(text);
        let out = run(http("http.get", json!({"url": base}))).await.unwrap();
        assert_eq!(out.value["body"], "{\"looks\": \"like json\"}");

        fn broken_json(_: &Seen) -> Reply {
            reply(200, "application/problem+json", "not json")
        }
        let (base, _seen) = serve(broken_json);
        let out = run(http("http.get", json!({"url": base}))).await.unwrap();
        assert_eq!(out.value["body"], "not json");
    }

    /// A body that never ends (sent in chunks, with no length), and one whose length says it
    /// is past the limit: the call fails for good, without the body being held whole.
    #[tokio::test]
    async fn a_body_past_the_result_limit_fails_the_call_for_good() {
        use std::io::Read;
        let base = serve_raw(|request| {
            let (body, length): (Box<dyn Read + Send>, _) = match request.url() {
                "/endless" => (Box::new(std::io::repeat(b'a')), None),
                _ => (
                    Box::new(std::io::repeat(b'a').take(RESULT_LIMIT as u64 + 1)),
                    Some(RESULT_LIMIT + 1),
                ),
            };
            let _ = request.respond(tiny_http::Response::new(
                200.into(),
                vec![],
                body,
                length,
                None,
            ));
        });
        for path in ["endless", "long"] {
            let url = format!("{base}/{path}");
            let err = run(http("http.get", json!({ "url": url })))
                .await
                .unwrap_err();
            assert_eq!(err.code, codes::HTTP_RESPONSE, "{path}: {}", err.message);
            assert!(!err.retryable);
            assert!(
                err.message.contains("longer than 64 MiB"),
                "{}",
                err.message
            );
        }
    }

    /// A body in the encoding its `Content-Type` names is read in that encoding.
    #[tokio::test]
    async fn a_body_is_decoded_by_its_charset() {
        let base = serve_raw(|request| {
            let header =
                tiny_http::Header::from_bytes("Content-Type", "text/plain; charset=\"ISO-8859-1\"")
                    .unwrap();
            let latin1 = vec![b'c', b'a', b'f', 0xE9];
            let _ = request.respond(tiny_http::Response::from_data(latin1).with_header(header));
        });
        let out = run(http("http.get", json!({ "url": base }))).await.unwrap();
        assert_eq!(out.value["body"], "café");
    }

    #[tokio::test]
    async fn effects_send_the_idempotency_key_and_their_body() {
        fn echo_body(seen: &Seen) -> Reply {
            reply(201, "application/vnd.api+json", &seen.body)
        }
        let (base, seen) = serve(echo_body);
        let out = run(http(
            "http.post",
            json!({"url": base, "json": {"a": [1, "x"]}}),
        ))
        .await
        .unwrap();
        assert_eq!(out.value["status"], 201);
        assert_eq!(out.value["body"], json!({"a": [1, "x"]}));
        let seen = seen.recv().unwrap();
        assert_eq!(seen.method, "POST");
        assert_eq!(seen.header("idempotency-key"), Some("idem-1"));
        assert_eq!(seen.header("content-type"), Some("application/json"));

        let (base, seen) = serve(echo_body);
        run(http("http.put", json!({"url": base, "body": "raw text"})))
            .await
            .unwrap();
        let seen = seen.recv().unwrap();
        assert_eq!(seen.method, "PUT");
        assert_eq!(seen.body, "raw text");
        assert_eq!(seen.header("idempotency-key"), Some("idem-1"));

        // A read sends no key even if one is (wrongly) given.
        let (base, seen) = serve(json_ok);
        let mut call = http("http.get", json!({"url": base}));
        call.idempotency_key = Some("idem-2".to_string());
        run(call).await.unwrap();
        assert_eq!(seen.recv().unwrap().header("idempotency-key"), None);
    }

    #[tokio::test]
    async fn server_errors_and_429_may_be_retried_other_4xx_not() {
        fn fail(seen: &Seen) -> Reply {
            let status = seen.url.trim_start_matches('/').parse().unwrap_or(500);
            reply(status, "application/json", r#"{"error": "nope"}"#)
        }
        let (base, _seen) = serve(fail);
        let err = run(http("http.delete", json!({"url": format!("{base}/500")})))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::HTTP_STATUS);
        assert!(err.retryable);
        let cause = err.cause.unwrap();
        assert_eq!(cause["status"], 500);
        assert_eq!(cause["body"], json!({"error": "nope"}));
        assert_eq!(cause["headers"]["x-trace"], "t-1");
        assert!(err.message.contains("500"), "{}", err.message);

        let err = run(http("http.get", json!({"url": format!("{base}/429")})))
            .await
            .unwrap_err();
        assert!(err.retryable);

        let err = run(http("http.get", json!({"url": format!("{base}/404")})))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::HTTP_STATUS);
        assert!(!err.retryable);
        assert!(err.message.contains("404 Not Found"), "{}", err.message);
        assert!(err.message.contains("check the url"), "{}", err.message);
    }

    #[tokio::test]
    async fn effects_return_redirects_as_they_are() {
        fn moved(_: &Seen) -> Reply {
            reply(303, "text/plain", "see other")
        }
        let (base, _seen) = serve(moved);
        let out = run(http("http.post", json!({"url": base}))).await.unwrap();
        assert_eq!(out.value["status"], 303);
    }

    #[tokio::test]
    async fn a_slow_server_times_out() {
        fn slow(_: &Seen) -> Reply {
            Reply {
                delay: Duration::from_secs(3),
                ..reply(200, "text/plain", "late")
            }
        }
        let (base, _seen) = serve(slow);
        let mut call = http("http.get", json!({"url": base}));
        call.timeout = Some(Duration::from_millis(200));
        let started = Instant::now();
        let err = run(call).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(err.code, codes::HTTP_TIMEOUT);
        assert!(err.retryable);
        assert!(err.message.contains("200ms"), "{}", err.message);
    }

    #[tokio::test]
    async fn cancellation_drops_the_request() {
        fn slow(_: &Seen) -> Reply {
            Reply {
                delay: Duration::from_secs(3),
                ..reply(200, "text/plain", "late")
            }
        }
        let (base, _seen) = serve(slow);
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            trigger.cancel();
        });
        let started = Instant::now();
        let err = ToolHost::new()
            .call(http("http.get", json!({"url": base})), cancel)
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(err.code, codes::CANCELED);
        assert!(!err.retryable);
    }

    #[tokio::test]
    async fn a_refused_connection_may_be_retried() {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let err = run(http(
            "http.get",
            json!({"url": format!("http://127.0.0.1:{port}/")}),
        ))
        .await
        .unwrap_err();
        assert_eq!(err.code, codes::HTTP_CONNECT);
        assert!(err.retryable);
        assert!(err.message.contains(&port.to_string()), "{}", err.message);
    }

    #[tokio::test]
    async fn bad_urls_and_arguments_are_not_retried() {
        for url in ["not a url", "ftp://example.com/x", "/relative"] {
            let err = run(http("http.get", json!({"url": url})))
                .await
                .unwrap_err();
            assert_eq!(err.code, codes::HTTP_URL, "{url}");
            assert!(!err.retryable);
            assert!(err.message.contains(url), "{}", err.message);
        }
        let err = run(http(
            "http.get",
            json!({"url": "http://x", "query": {"n": 2}}),
        ))
        .await
        .unwrap_err();
        assert_eq!(err.code, codes::ARGS);
        assert!(err.message.contains("`query`"), "{}", err.message);

        let err = run(http(
            "http.post",
            json!({"url": "http://x", "json": 1, "body": "b"}),
        ))
        .await
        .unwrap_err();
        assert_eq!(err.code, codes::ARGS);

        let err = run(http(
            "http.get",
            json!({"url": "http://x", "headers": {"a b": "c"}}),
        ))
        .await
        .unwrap_err();
        assert_eq!(err.code, codes::ARGS);

        let mut call = http(
            "http.get",
            json!({"url": "http://x", "bearer": "line\nbreak"}),
        );
        call.secrets = vec![("tok".to_string(), "line\nbreak".to_string())].into();
        let err = run(call).await.unwrap_err();
        assert_eq!(err.code, codes::ARGS);
        assert!(!err.message.contains("line\nbreak"));
    }

    #[test]
    fn json_content_types() {
        let mut headers = HeaderMap::new();
        for (value, expected) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("application/ld+json", true),
            ("text/json", false),
            ("text/html", false),
        ] {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(is_json(&headers), expected, "{value}");
        }
    }
}
