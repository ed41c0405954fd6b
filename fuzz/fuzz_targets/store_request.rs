#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fabcoll_fabric::fuzz::store_request(data));
