//! ListTools pages: how many tools one holds, the opaque token that
//! continues a walk in the snapshot it started in, and the bounded cache of
//! rendered pages.

use crate::Refusal;
use crate::projection::Projection;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use prost::Message;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, Weak};
use toolmesh::pb::{ListToolsResponse, ToolFormat};

/// Tools in one ListTools page at most, and in a page whose size is not
/// asked (`page_size` 0).
pub const MAX_LIST_PAGE: u32 = 1_000;

/// Encoded bytes of one page at most. A page carries each schema twice in
/// a vendor's shape (the spec's and the shaped one): 1,000 tools of 2 KiB
/// schemas are about 5 MiB, of 3.4 KiB about 8 MiB, so a page of tools
/// with larger schemas holds fewer of them and every page stays within
/// the 8 MiB message limit.
const MAX_PAGE_BYTES: usize = 6 << 20;

/// Pages kept at most.
const CACHE_PAGES: usize = 1_024;
/// Encoded bytes of the kept pages together at most. Pages are kept
/// decoded, somewhat larger than encoded, and a page is worth keeping for
/// the callers who list it again while its snapshot stands (the first
/// pages, most of all), not for a walk over everything: at 100,000 tools
/// 64 MiB grew a dispatcher holding the catalog in 499 MiB to 679 MiB
/// after one full listing.
const CACHE_BYTES: usize = 16 << 20;
/// What every token starts with (its layout's version).
const TOKEN_LAYOUT: &str = "p1";

/// The page size a request gets for asking `asked`: 0 or more than
/// [`MAX_LIST_PAGE`] is [`MAX_LIST_PAGE`].
pub(crate) fn size(asked: u32) -> usize {
    match asked {
        0 => MAX_LIST_PAGE as usize,
        asked => asked.min(MAX_LIST_PAGE) as usize,
    }
}

/// The page of the tools in `wanted` (by position) that `render` renders,
/// and where it ends: all of them, or as many from the first as fit
/// [`MAX_PAGE_BYTES`] (halving; at least one).
pub(crate) fn fitted(
    wanted: Range<usize>,
    render: impl Fn(Range<usize>) -> ListToolsResponse,
) -> (ListToolsResponse, usize) {
    let mut end = wanted.end;
    loop {
        let page = render(wanted.start..end);
        if end - wanted.start <= 1 || page.encoded_len() <= MAX_PAGE_BYTES {
            return (page, end);
        }
        end = wanted.start + (end - wanted.start) / 2;
    }
}

/// Where a walk over pages stands: the snapshot its first page listed
/// (version within a registry lifetime) and the last tool listed so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resume {
    pub(crate) snapshot_version: u64,
    pub(crate) epoch: String,
    pub(crate) after: String,
}

impl Resume {
    /// The `page_token` of this position: base64url of
    /// `p1/VERSION/EPOCH/NAME` (a tool name holds no '/').
    pub(crate) fn token(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!(
            "{TOKEN_LAYOUT}/{}/{}/{}",
            self.snapshot_version, self.epoch, self.after
        ))
    }

    /// The position `token` names, or why it is no token of ours.
    pub(crate) fn parse(token: &str) -> Result<Resume, Refusal> {
        let bad = |why: &str| Refusal::BadPageToken {
            token: token.chars().take(64).collect(),
            why: why.to_owned(),
        };
        let text = URL_SAFE_NO_PAD
            .decode(token)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| bad("not base64url text"))?;
        let rest = text
            .strip_prefix(TOKEN_LAYOUT)
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| bad("unknown layout"))?;
        let (version, rest) = rest.split_once('/').ok_or_else(|| bad("no snapshot"))?;
        let (epoch, after) = rest.rsplit_once('/').ok_or_else(|| bad("no position"))?;
        let snapshot_version = version.parse().map_err(|_| bad("no snapshot version"))?;
        if after.is_empty() {
            return Err(bad("no position"));
        }
        Ok(Resume {
            snapshot_version,
            epoch: epoch.to_owned(),
            after: after.to_owned(),
        })
    }
}

/// Which page: of which projection (by address, alive while its `Weak`
/// is), in which format, after which name, how many tools, deferred or not.
type PageKey = (usize, i32, String, usize, bool);

/// Rendered pages: a walk, or many callers with one view, render each page
/// once. Bounded by count and by bytes; a projection built anew starts its
/// pages anew.
#[derive(Debug, Default)]
pub(crate) struct PageCache {
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    pages: HashMap<PageKey, (Weak<Projection>, Arc<ListToolsResponse>)>,
    bytes: usize,
}

impl PageCache {
    /// The page of `projection` in `format` after `after` of `size` tools
    /// (`deferred`: for tool search on the model's side), or `render`'s,
    /// remembered.
    pub(crate) fn get_or_render(
        &self,
        projection: &Arc<Projection>,
        (format, after, size, deferred): (ToolFormat, &str, usize, bool),
        render: impl FnOnce() -> ListToolsResponse,
    ) -> Arc<ListToolsResponse> {
        let key = (
            Arc::as_ptr(projection) as usize,
            format as i32,
            after.to_owned(),
            size,
            deferred,
        );
        if let Some((_, page)) = self.lock().pages.get(&key) {
            return page.clone();
        }
        let page = Arc::new(render());
        let bytes = page.encoded_len();
        let mut kept = self.lock();
        if kept.pages.len() >= CACHE_PAGES || kept.bytes + bytes > CACHE_BYTES {
            // Pages of projections no longer held go first.
            kept.pages.retain(|_, (of, _)| of.strong_count() > 0);
            kept.bytes = kept.pages.values().map(|(_, p)| p.encoded_len()).sum();
            if kept.pages.len() >= CACHE_PAGES || kept.bytes + bytes > CACHE_BYTES {
                kept.pages.clear();
                kept.bytes = 0;
            }
        }
        if bytes <= CACHE_BYTES {
            let replaced = kept
                .pages
                .insert(key, (Arc::downgrade(projection), page.clone()));
            kept.bytes = kept.bytes + bytes - replaced.map_or(0, |(_, p)| p.encoded_len());
        }
        page
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    /// A token names its snapshot, epoch and position and reads back the
    /// same; anything else is refused as not ours, saying to start over.
    #[test]
    fn tokens_round_trip_and_strangers_are_refused() {
        let resume = Resume {
            snapshot_version: 42,
            epoch: "3f2a/b".into(),
            after: "billing_refund".into(),
        };
        assert_eq!(Resume::parse(&resume.token()).unwrap(), resume);
        let no_name = URL_SAFE_NO_PAD.encode("p1/42/e/");
        for stranger in ["", "after:x", "!!!", "cDEvNDI", &no_name] {
            let status = tonic::Status::from(Resume::parse(stranger).unwrap_err());
            assert_eq!(status.code(), Code::InvalidArgument, "{stranger}");
            assert!(
                status.message().contains("list again from the first page"),
                "{}",
                status.message()
            );
        }
    }

    /// A page that would pass the byte bound holds fewer tools, from the
    /// first; one that fits is all asked for.
    #[test]
    fn pages_fit_the_byte_bound() {
        let render = |range: Range<usize>| ListToolsResponse {
            formatted: "x".repeat(range.len() << 20),
            ..ListToolsResponse::default()
        };
        assert_eq!(fitted(3..7, render).1, 7);
        let (page, end) = fitted(10..30, render);
        assert_eq!(end, 15);
        assert!(page.encoded_len() <= MAX_PAGE_BYTES);
        assert_eq!(fitted(0..1, |_| render(0..9)).1, 1, "at least one");
    }

    /// Page sizes: 0 is the default, the maximum caps what is asked.
    #[test]
    fn page_size_is_bounded() {
        assert_eq!(size(0), 1_000);
        assert_eq!(size(7), 7);
        assert_eq!(size(1_000_000), 1_000);
    }
}
