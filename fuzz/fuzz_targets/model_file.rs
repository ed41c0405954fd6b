#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fabcoll::fuzz::model_file(data));
