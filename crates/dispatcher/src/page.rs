//! ListTools pages: how many tools one holds, the opaque token that
//! continues a walk in the snapshot it started in, and the bounded cache of
//! rendered pages.

use crate::Refusal;
use crate::projection::Projection;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use prost::Message;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use toolmesh::pb::{ListToolsResponse, ToolFormat};

/// Tools in one ListTools page at most, and in a page whose size is not
/// asked (`page_size` 0). A page of 1,000 tools of realistic 1–3 KiB
/// schemas in the widest format stays well under the 8 MiB message limit.
pub const MAX_LIST_PAGE: u32 = 1_000;

/// Pages kept at most.
const CACHE_PAGES: usize = 1_024;
/// Encoded bytes of the kept pages together at most.
const CACHE_BYTES: usize = 64 << 20;
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
/// is), in which format, after which name, how many tools.
type PageKey = (usize, i32, String, usize);

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
    /// The page of `projection` in `format` after `after` of `size` tools,
    /// or `render`'s, remembered.
    pub(crate) fn get_or_render(
        &self,
        projection: &Arc<Projection>,
        (format, after, size): (ToolFormat, &str, usize),
        render: impl FnOnce() -> ListToolsResponse,
    ) -> Arc<ListToolsResponse> {
        let key = (
            Arc::as_ptr(projection) as usize,
            format as i32,
            after.to_owned(),
            size,
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

    /// Page sizes: 0 is the default, the maximum caps what is asked.
    #[test]
    fn page_size_is_bounded() {
        assert_eq!(size(0), 1_000);
        assert_eq!(size(7), 7);
        assert_eq!(size(1_000_000), 1_000);
    }
}
