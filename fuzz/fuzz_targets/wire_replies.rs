//! Every decoder of bytes a server sends, on arbitrary bytes: each returns a value or an error,
//! never panics, and where the type has an encoder, a decoded value encodes to bytes that decode
//! to the same value (padding bytes are not kept).

#![no_main]

use ggml_backend_rs_rpc::wire::{
    decode_bool, decode_u32, decode_u64, AllocBufferReply, DeviceMemory, GraphMsg, HelloReply,
    WireTensor,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 8 {
        0 => {
            if let Ok(h) = HelloReply::decode(bytes) {
                assert_eq!(HelloReply::decode(&h.encode()), Ok(h));
            }
        }
        1 => {
            let _ = AllocBufferReply::decode(bytes);
        }
        2 => {
            let _ = DeviceMemory::decode(bytes);
        }
        3 => {
            let _ = decode_u32("fuzz", bytes);
            let _ = decode_u64("fuzz", bytes);
            let _ = decode_bool("fuzz", bytes);
        }
        4 => {
            if let Ok(t) = WireTensor::decode(bytes) {
                assert_eq!(WireTensor::decode(&t.encode()), Ok(t));
            }
        }
        _ => {
            // the graph message a server parses: its decoder checks sizes and ids
            let _ = GraphMsg::decode(bytes);
        }
    }
});
