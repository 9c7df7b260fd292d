//! gRPC codecs that keep OTLP requests as raw protobuf bytes, so they reach the OTLP decoder
//! (which writes straight into Arrow builders) without a prost object tree in between.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Server side: requests arrive as raw bytes, responses are prost messages.
#[derive(Debug)]
pub struct RawRequestCodec<R>(PhantomData<R>);

impl<R> Default for RawRequestCodec<R> {
    fn default() -> Self {
        RawRequestCodec(PhantomData)
    }
}

/// Client side: requests are sent as raw bytes, responses are prost messages.
#[derive(Debug)]
pub struct RawResponseCodec<R>(PhantomData<R>);

impl<R> Default for RawResponseCodec<R> {
    fn default() -> Self {
        RawResponseCodec(PhantomData)
    }
}

/// Takes a message's bytes as they are.
#[derive(Debug, Default)]
pub struct BytesDecoder;

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
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

/// Encodes a prost message.
#[derive(Debug)]
pub struct MessageEncoder<R>(PhantomData<R>);

impl<R: prost::Message> Encoder for MessageEncoder<R> {
    type Item = R;
    type Error = Status;

    fn encode(&mut self, item: R, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding a response: {e}")))
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

impl<R: prost::Message + Send + 'static> Codec for RawRequestCodec<R> {
    type Encode = R;
    type Decode = Bytes;
    type Encoder = MessageEncoder<R>;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        MessageEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        BytesDecoder
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
