//! gRPC codecs of the gateway's clients: OTLP requests already encoded as protobuf bytes (no
//! prost object tree in between), and prost responses.

use std::marker::PhantomData;

use bytes::{BufMut, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Client side: requests are sent as raw bytes, responses are prost messages.
#[derive(Debug)]
pub struct RawResponseCodec<R>(PhantomData<R>);

impl<R> Default for RawResponseCodec<R> {
    fn default() -> Self {
        RawResponseCodec(PhantomData)
    }
}

/// Writes bytes as they are.
#[derive(Debug, Default)]
pub struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

/// Decodes a prost message.
#[derive(Debug)]
pub struct MessageDecoder<R>(PhantomData<R>);

impl<R> Default for MessageDecoder<R> {
    fn default() -> Self {
        MessageDecoder(PhantomData)
    }
}

impl<R: prost::Message + Default> Decoder for MessageDecoder<R> {
    type Item = R;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<R>, Status> {
        R::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("decoding a response: {e}")))
    }
}

impl<R: prost::Message + Default + Send + 'static> Codec for RawResponseCodec<R> {
    type Encode = Bytes;
    type Decode = R;
    type Encoder = BytesEncoder;
    type Decoder = MessageDecoder<R>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        MessageDecoder(PhantomData)
    }
}
