//! gRPC codecs of the gateway's clients: one for OTLP requests already encoded as protobuf
//! bytes (no prost object tree in between), one for prost messages written into room reserved
//! for all of them; both read prost responses.

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

/// A prost codec whose encoder reserves room for the whole message before writing it: tonic's
/// buffer would otherwise grow as the message is written, copying what it holds each time (an
/// OTAP batch of 4096 logs is about 250 KB).
#[derive(Debug)]
pub struct SizedCodec<E, D>(PhantomData<(E, D)>);

impl<E, D> Default for SizedCodec<E, D> {
    fn default() -> Self {
        SizedCodec(PhantomData)
    }
}

/// Encodes a prost message into room reserved for all of it.
#[derive(Debug)]
pub struct SizedEncoder<E>(PhantomData<E>);

impl<E: prost::Message> Encoder for SizedEncoder<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.encoded_len());
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding a request: {e}")))
    }
}

impl<E, D> Codec for SizedCodec<E, D>
where
    E: prost::Message + Send + 'static,
    D: prost::Message + Default + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = SizedEncoder<E>;
    type Decoder = MessageDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        SizedEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        MessageDecoder(PhantomData)
    }
}
