//! The Dispatcher service's server answering ListTools with a page shared by `Arc` ([`SharedListTools`]): a rendered page is kept once and encoded straight from there for every caller that asks for it, never copied first.

use crate::ListToolsResponse;
use prost::bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType};
use std::sync::Arc;

/// A `ListToolsResponse` on the wire, held by `Arc`: it encodes as the
/// message it holds (decoding one, should anything do so, fills its own).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedListTools(pub Arc<ListToolsResponse>);

impl prost::Message for SharedListTools {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.0.encode_raw(buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        Arc::make_mut(&mut self.0).merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.encoded_len()
    }

    fn clear(&mut self) {
        self.0 = Arc::default();
    }
}

/// The generated server: the contract's types, [`SharedListTools`] for
/// ListTools' answer.
mod generated {
    include!(concat!(env!("OUT_DIR"), "/shared/toolmesh.v1.rs"));
}

pub use generated::dispatcher_server;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolSpec;
    use prost::Message;

    /// A shared page encodes to the very bytes of the message it holds,
    /// and those bytes decode back to it.
    #[test]
    fn a_shared_page_encodes_as_the_message() {
        let page = ListToolsResponse {
            tools: vec![ToolSpec {
                name: "weather_now".into(),
                description: "The weather where you say.".into(),
                ..Default::default()
            }],
            snapshot_version: 7,
            ..Default::default()
        };
        let shared = SharedListTools(Arc::new(page.clone()));
        let bytes = shared.encode_to_vec();
        assert_eq!(bytes, page.encode_to_vec());
        assert_eq!(shared.encoded_len(), bytes.len());
        let decoded = SharedListTools::decode(bytes.as_slice()).unwrap();
        assert_eq!(*decoded.0, page);
    }
}
