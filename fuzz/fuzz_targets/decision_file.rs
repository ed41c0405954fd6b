#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fabcoll::fuzz::decision_file(data));
