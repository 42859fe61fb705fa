//! A whole ListTools listing from its pages: what a client that wants every
//! tool asks for, one page after another, until no page follows.

use crate::pb::{ListToolsRequest, ListToolsResponse};
use std::future::Future;

/// Every page of the listing `request` starts (from its first page, or
/// from its `page_token`), fetched by `fetch` one after another and joined
/// ([`join_page`]): one snapshot, every tool once, in order.
pub async fn list_all<F, Fut, E>(
    request: ListToolsRequest,
    mut fetch: F,
) -> Result<ListToolsResponse, E>
where
    F: FnMut(ListToolsRequest) -> Fut,
    Fut: Future<Output = Result<ListToolsResponse, E>>,
{
    let mut joined = fetch(request.clone()).await?;
    while !joined.next_page_token.is_empty() {
        let next = ListToolsRequest {
            page_token: joined.next_page_token.clone(),
            ..request.clone()
        };
        let page = fetch(next).await?;
        join_page(&mut joined, page);
    }
    Ok(joined)
}

/// Joins `page`, the page after `joined` in one walk, onto it: its tools
/// after the others, its formatted tools into the same array (the top-level
/// array, or Gemini's `functionDeclarations`: in every format the items sit
/// between the text's first '[' and its last ']'), and its next page token.
pub fn join_page(joined: &mut ListToolsResponse, page: ListToolsResponse) {
    joined.tools.extend(page.tools);
    joined.next_page_token = page.next_page_token;
    let items = |text: &str| Some((text.find('[')?, text.rfind(']')?));
    let (Some((_, end)), Some((open, close))) = (items(&joined.formatted), items(&page.formatted))
    else {
        return;
    };
    let added = page.formatted[open + 1..close].trim();
    if added.is_empty() {
        return;
    }
    let has_items = joined.formatted[..end].trim_end().ends_with(|c| c != '[');
    let tail = joined.formatted.split_off(end);
    if has_items {
        joined.formatted.push(',');
    }
    joined.formatted.push_str(added);
    joined.formatted.push_str(&tail);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn page(formatted: Value, next: &str) -> ListToolsResponse {
        ListToolsResponse {
            formatted: formatted.to_string(),
            next_page_token: next.into(),
            ..ListToolsResponse::default()
        }
    }

    /// Pages join into the one array of every format, empty pages included,
    /// and the last page's (empty) token ends the walk.
    #[test]
    fn pages_join_into_one_array() {
        let mut joined = page(json!([{"name": "a"}, {"name": "b"}]), "t1");
        join_page(&mut joined, page(json!([]), "t2"));
        join_page(&mut joined, page(json!([{"name": "c"}]), ""));
        let value: Value = serde_json::from_str(&joined.formatted).unwrap();
        assert_eq!(value, json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]));
        assert!(joined.next_page_token.is_empty());

        let gemini = |names: &[&str]| json!({"functionDeclarations": names.iter().map(|n| json!({"name": n, "p": [1]})).collect::<Vec<_>>()});
        let mut joined = page(gemini(&[]), "t1");
        join_page(&mut joined, page(gemini(&["a", "b"]), "t2"));
        join_page(&mut joined, page(gemini(&["c"]), ""));
        let value: Value = serde_json::from_str(&joined.formatted).unwrap();
        assert_eq!(value, gemini(&["a", "b", "c"]));

        let mut native = ListToolsResponse::default();
        join_page(&mut native, ListToolsResponse::default());
        assert!(native.formatted.is_empty());
    }

    /// A walk asks page after page with the token each answer gives, the
    /// rest of the request unchanged, until a page has none.
    #[test]
    fn a_walk_follows_the_tokens() {
        let asked = std::sync::Mutex::new(Vec::new());
        let request = ListToolsRequest {
            format: 5,
            ..ListToolsRequest::default()
        };
        let walk = list_all(request, |r| {
            asked.lock().unwrap().push((r.page_token.clone(), r.format));
            let next = match r.page_token.as_str() {
                "" => "p2",
                "p2" => "p3",
                _ => "",
            };
            let name = if next.is_empty() { "z" } else { next };
            std::future::ready(Ok::<_, ()>(page(json!([{ "name": name }]), next)))
        });
        // Every page is ready at once: one poll runs the whole walk.
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let std::task::Poll::Ready(all) = std::pin::pin!(walk).poll(&mut context) else {
            panic!("a walk over ready pages finishes in one poll");
        };
        let all = all.unwrap();
        let value: Value = serde_json::from_str(&all.formatted).unwrap();
        assert_eq!(
            value,
            json!([{"name": "p2"}, {"name": "p3"}, {"name": "z"}])
        );
        let asked = asked.into_inner().unwrap();
        assert_eq!(asked, [("".into(), 5), ("p2".into(), 5), ("p3".into(), 5)]);
    }
}
