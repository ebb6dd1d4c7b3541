//! The RPC client fed an arbitrary byte stream by a server on the loopback address: the input
//! is everything the "server" sends (HELLO's reply first), after which it closes its side. The
//! client shakes hands and makes one call of each kind; every call must return, Ok or an
//! error, without a panic, and within its bounds (a short reply timeout: libFuzzer's -timeout
//! catches a wait that does not end).

#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};
use std::time::Duration;

use ggml_backend_rs_rpc::wire::WireTensor;
use ggml_backend_rs_rpc::{Client, Timeouts};
use libfuzzer_sys::fuzz_target;

fn tensor(id: u64, buffer: u64, data: u64) -> WireTensor {
    WireTensor {
        id,
        buffer,
        data,
        ne: [16, 1, 1, 1],
        nb: [4, 64, 64, 64],
        ..WireTensor::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let listener = TcpListener::bind("127.0.0.1:0").expect("loopback");
    let addr = listener.local_addr().expect("address").to_string();
    let input = data.to_vec();
    let server = std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = s.write_all(&input);
        let _ = s.shutdown(Shutdown::Write);
        let mut sink = [0u8; 4096];
        while let Ok(n) = s.read(&mut sink) {
            if n == 0 {
                break;
            }
        }
    });
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        reply: Duration::from_millis(500),
        compute: Duration::from_millis(500),
        min_rate: 1 << 20,
    };
    if let Ok(mut c) = Client::connect(&addr, &timeouts) {
        let t = tensor(1, 0xb0f, 0x1000);
        let _ = c.device_count();
        let _ = c.alignment(0);
        let _ = c.max_size(0);
        if let Ok(Some(b)) = c.alloc_buffer(0, 4096) {
            let _ = c.buffer_base(b.handle);
        }
        let mut out = [0u8; 64];
        let _ = c.get_tensor(&t, 0, &mut out);
        let _ = c.set_tensor_hash(&t, 0, 42);
        let _ = c.copy_tensor(&t, &tensor(2, 0xb0f, 0x2000));
        let _ = c.alloc_size(0, &t, &[]);
        let _ = c.device_memory(0);
        let _ = c.graph_compute(0, &[1], &[t]);
        let _ = c.synchronize();
    }
    let _ = server.join();
});
