//! The lanes' AEAD: AWS-LC's `EVP_AEAD_CTX` for TLS 1.3's three ciphers, with the one call
//! that ring's API lacks: sealing plaintext from where it lies into a record elsewhere.
//!
//! Why: ring seals only in place, so a sender first copies each record's plaintext into its
//! record, then encrypts it there. On the 2-core test machine that copy was a third of the
//! sealing side's cost: copying and sealing 16 KiB records out of 256 MiB ran at 3.0-3.2 GB/s
//! a core, sealing from the source into the record at 4.3-4.4 GB/s (`BENCHMARKS.md`, stop 44).
//! AWS-LC's `EVP_AEAD_CTX_seal_scatter` reads its input from one buffer and writes the
//! ciphertext to another, and encrypts a few trailing bytes (TLS 1.3's inner content type)
//! from a third into the tag's place, so a record is sealed in one pass over its plaintext.
//! `EVP_AEAD_CTX_open_gather` likewise opens a record from the buffer it was read into straight
//! to where its plaintext belongs (a CPU device's memory), which ring cannot do either.
//!
//! This is the crate's only foreign call into cryptography: a handful of functions, each
//! checked here for the lengths AWS-LC requires. AWS-LC is linked statically, its symbols carry
//! a version prefix and `libac.so` exports none of them, so a C, Fortran or MPI program that
//! also links OpenSSL sees no clash.

#![allow(unsafe_code)]

use std::ptr::NonNull;

use aws_lc_sys as sys;

/// The length of a tag for every cipher here.
pub const TAG: usize = 16;
/// The length of a nonce for every cipher here.
pub const NONCE: usize = 12;

/// What a lane may negotiate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    /// TLS_AES_128_GCM_SHA256.
    Aes128Gcm,
    /// TLS_AES_256_GCM_SHA384.
    Aes256Gcm,
    /// TLS_CHACHA20_POLY1305_SHA256.
    Chacha20Poly1305,
}

impl Cipher {
    fn algorithm(self) -> *const sys::EVP_AEAD {
        // SAFETY: these return pointers to static tables; they take no arguments.
        unsafe {
            match self {
                Cipher::Aes128Gcm => sys::EVP_aead_aes_128_gcm(),
                Cipher::Aes256Gcm => sys::EVP_aead_aes_256_gcm(),
                Cipher::Chacha20Poly1305 => sys::EVP_aead_chacha20_poly1305(),
            }
        }
    }

    /// The key length the cipher takes.
    pub fn key_len(self) -> usize {
        match self {
            Cipher::Aes128Gcm => 16,
            Cipher::Aes256Gcm | Cipher::Chacha20Poly1305 => 32,
        }
    }
}

/// The AEAD failed: a key of the wrong length, or a record that does not authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed;

/// One direction's key, set up once.
#[derive(Debug)]
pub struct Key {
    ctx: NonNull<sys::EVP_AEAD_CTX>,
}

// SAFETY: an `EVP_AEAD_CTX` holds only the expanded key after `EVP_AEAD_CTX_new`; sealing and
// opening take it by `const` pointer and keep no state in it, so it may move between threads
// and be used from several at once (aws-lc-rs's keys wrap the same context and are Send + Sync).
unsafe impl Send for Key {}
// SAFETY: as above.
unsafe impl Sync for Key {}

impl Key {
    /// A key for `cipher`; fails if `key` has the wrong length.
    pub fn new(cipher: Cipher, key: &[u8]) -> Result<Self, Failed> {
        if key.len() != cipher.key_len() {
            return Err(Failed);
        }
        static INIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: takes no arguments; AWS-LC asks for it before first use where its static
        // constructor does not run (aws-lc-rs calls it once the same way).
        INIT.call_once(|| unsafe { sys::CRYPTO_library_init() });
        // SAFETY: `key` is valid for `key.len()` bytes; the algorithm is a static table.
        let ctx = unsafe { sys::EVP_AEAD_CTX_new(cipher.algorithm(), key.as_ptr(), key.len(), TAG) };
        NonNull::new(ctx).map(|ctx| Self { ctx }).ok_or(Failed)
    }

    /// Encrypts `plain` into `out` (as long as `plain`), then the byte `last` into
    /// `trailer[0]`, and writes the tag over both into `trailer[1..]`: a TLS 1.3 record's
    /// ciphertext and its inner content type, sealed from where the plaintext lies.
    pub fn seal_into(
        &self,
        nonce: &[u8; NONCE],
        aad: &[u8],
        plain: &[u8],
        out: &mut [u8],
        last: u8,
        trailer: &mut [u8; 1 + TAG],
    ) -> Result<(), Failed> {
        assert_eq!(plain.len(), out.len(), "a sealed record's ciphertext is as long as its plaintext");
        // SAFETY: `plain` and `out` are distinct borrows (AWS-LC allows in and out to be the
        // same or not to overlap), each valid for `plain.len()` bytes.
        unsafe { self.seal_raw(nonce, aad, plain.as_ptr(), out.as_mut_ptr(), plain.len(), last, trailer) }
    }

    /// As [`Key::seal_into`], with the plaintext already where its ciphertext goes.
    pub fn seal_in_place(
        &self,
        nonce: &[u8; NONCE],
        aad: &[u8],
        in_out: &mut [u8],
        last: u8,
        trailer: &mut [u8; 1 + TAG],
    ) -> Result<(), Failed> {
        let at = in_out.as_mut_ptr();
        // SAFETY: input and output are exactly the same bytes, which AWS-LC allows.
        unsafe { self.seal_raw(nonce, aad, at, at, in_out.len(), last, trailer) }
    }

    /// # Safety
    /// `input` and `out` are valid for `len` bytes, and either equal or not overlapping.
    #[allow(clippy::too_many_arguments)]
    unsafe fn seal_raw(
        &self,
        nonce: &[u8; NONCE],
        aad: &[u8],
        input: *const u8,
        out: *mut u8,
        len: usize,
        last: u8,
        trailer: &mut [u8; 1 + TAG],
    ) -> Result<(), Failed> {
        let extra = [last];
        let mut written = 0usize;
        // SAFETY: the caller vouches for `input` and `out`; `trailer` has room for the one
        // extra byte and the tag (`max_out_tag_len`); nonce, extra and aad are valid slices.
        let ok = unsafe {
            sys::EVP_AEAD_CTX_seal_scatter(
                self.ctx.as_ptr(),
                out,
                trailer.as_mut_ptr(),
                &mut written,
                trailer.len(),
                nonce.as_ptr(),
                NONCE,
                input,
                len,
                extra.as_ptr(),
                extra.len(),
                aad.as_ptr(),
                aad.len(),
            )
        };
        if ok == 1 && written == trailer.len() {
            Ok(())
        } else {
            Err(failed())
        }
    }

    /// Authenticates `in_out` (ciphertext) against `tag` and decrypts it in place. On failure
    /// the bytes of `in_out` are unspecified.
    pub fn open_in_place(
        &self,
        nonce: &[u8; NONCE],
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8; TAG],
    ) -> Result<(), Failed> {
        let at = in_out.as_mut_ptr();
        // SAFETY: input and output are exactly the same bytes, which AWS-LC allows.
        unsafe { self.open_raw(nonce, aad, at, at, in_out.len(), tag) }
    }

    /// Authenticates `sealed` (ciphertext) against `tag` and decrypts it into `out`, as long as
    /// `sealed`: a record opened from the buffer it was read into straight to where its
    /// plaintext belongs. On failure the bytes of `out` are unspecified.
    pub fn open_into(
        &self,
        nonce: &[u8; NONCE],
        aad: &[u8],
        sealed: &[u8],
        out: &mut [u8],
        tag: &[u8; TAG],
    ) -> Result<(), Failed> {
        assert_eq!(sealed.len(), out.len(), "an opened record's plaintext is as long as its ciphertext");
        // SAFETY: `sealed` and `out` are distinct borrows (so they do not overlap), each valid
        // for `sealed.len()` bytes.
        unsafe { self.open_raw(nonce, aad, sealed.as_ptr(), out.as_mut_ptr(), sealed.len(), tag) }
    }

    /// # Safety
    /// `input` and `out` are valid for `len` bytes, and either equal or not overlapping.
    unsafe fn open_raw(
        &self,
        nonce: &[u8; NONCE],
        aad: &[u8],
        input: *const u8,
        out: *mut u8,
        len: usize,
        tag: &[u8; TAG],
    ) -> Result<(), Failed> {
        // SAFETY: the caller vouches for `input` and `out`; the tag, nonce and aad are valid
        // slices of the lengths passed.
        let ok = unsafe {
            sys::EVP_AEAD_CTX_open_gather(
                self.ctx.as_ptr(),
                out,
                nonce.as_ptr(),
                NONCE,
                input,
                len,
                tag.as_ptr(),
                TAG,
                aad.as_ptr(),
                aad.len(),
            )
        };
        if ok == 1 {
            Ok(())
        } else {
            Err(failed())
        }
    }
}

/// The failure of a call, leaving no entry on AWS-LC's error queue for this thread (it keeps
/// one per failure until cleared; a lane that refuses a hostile record is dropped, the thread
/// goes on serving).
fn failed() -> Failed {
    // SAFETY: takes no arguments; clears only this thread's queue.
    unsafe { sys::ERR_clear_error() };
    Failed
}

impl Drop for Key {
    fn drop(&mut self) {
        // SAFETY: made by `EVP_AEAD_CTX_new`, freed once, here.
        unsafe { sys::EVP_AEAD_CTX_free(self.ctx.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CIPHERS: [Cipher; 3] = [Cipher::Aes128Gcm, Cipher::Aes256Gcm, Cipher::Chacha20Poly1305];

    fn key(cipher: Cipher) -> Key {
        Key::new(cipher, &vec![3; cipher.key_len()]).unwrap()
    }

    /// The reference: ring's seal of plaintext and content type together, tag appended.
    fn ring_sealed(cipher: Cipher, nonce: &[u8; NONCE], aad: &[u8], plain: &[u8], last: u8) -> Vec<u8> {
        let algorithm = match cipher {
            Cipher::Aes128Gcm => &ring::aead::AES_128_GCM,
            Cipher::Aes256Gcm => &ring::aead::AES_256_GCM,
            Cipher::Chacha20Poly1305 => &ring::aead::CHACHA20_POLY1305,
        };
        let key =
            ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(algorithm, &vec![3; cipher.key_len()]).unwrap());
        let mut wire = [plain, &[last]].concat();
        let nonce = ring::aead::Nonce::assume_unique_for_key(*nonce);
        key.seal_in_place_append_tag(nonce, ring::aead::Aad::from(aad), &mut wire).unwrap();
        wire
    }

    #[test]
    fn sealing_from_apart_or_in_place_gives_ring_s_record_and_opens_back() {
        for cipher in CIPHERS {
            for len in [0, 1, 15, 16, 17, 1000, 16384] {
                let plain: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                let (nonce, aad) = ([len as u8; NONCE], [23, 3, 3, 0, 9]);
                let expected = ring_sealed(cipher, &nonce, &aad, &plain, 23);

                let (mut out, mut trailer) = (vec![0; len], [0; 1 + TAG]);
                key(cipher).seal_into(&nonce, &aad, &plain, &mut out, 23, &mut trailer).unwrap();
                assert_eq!([&out[..], &trailer[..]].concat(), expected, "{cipher:?} {len} apart");

                let (mut in_place, mut trailer) = (plain.clone(), [0; 1 + TAG]);
                key(cipher).seal_in_place(&nonce, &aad, &mut in_place, 23, &mut trailer).unwrap();
                assert_eq!([&in_place[..], &trailer[..]].concat(), expected, "{cipher:?} {len} in place");

                let mut body = expected[..len + 1].to_vec();
                let tag: [u8; TAG] = expected[len + 1..].try_into().unwrap();
                let mut apart = vec![0; len + 1];
                key(cipher).open_into(&nonce, &aad, &body, &mut apart, &tag).unwrap();
                key(cipher).open_in_place(&nonce, &aad, &mut body, &tag).unwrap();
                assert_eq!(body, [&plain[..], &[23]].concat(), "{cipher:?} {len} opened");
                assert_eq!(apart, body, "{cipher:?} {len} opened apart");
            }
        }
    }

    #[test]
    fn a_changed_byte_tag_nonce_or_header_fails_to_open() {
        for cipher in CIPHERS {
            let (nonce, aad, plain) = ([1; NONCE], [23, 3, 3, 0, 9], vec![5u8; 300]);
            let sealed = ring_sealed(cipher, &nonce, &aad, &plain, 23);
            let (body, tag) = sealed.split_at(301);
            let tag: [u8; TAG] = tag.try_into().unwrap();
            let opens = |nonce: &[u8; NONCE], aad: &[u8], body: &[u8], tag: &[u8; TAG]| {
                let in_place = key(cipher).open_in_place(nonce, aad, &mut body.to_vec(), tag).is_ok();
                let apart = key(cipher).open_into(nonce, aad, body, &mut vec![0; body.len()], tag).is_ok();
                assert_eq!(in_place, apart, "{cipher:?}: opening in place and apart disagree");
                in_place
            };
            assert!(opens(&nonce, &aad, body, &tag));
            let mut changed = body.to_vec();
            changed[150] ^= 1;
            assert!(!opens(&nonce, &aad, &changed, &tag), "{cipher:?} body");
            let mut bad_tag = tag;
            bad_tag[0] ^= 1;
            assert!(!opens(&nonce, &aad, body, &bad_tag), "{cipher:?} tag");
            assert!(!opens(&[2; NONCE], &aad, body, &tag), "{cipher:?} nonce");
            assert!(!opens(&nonce, &[23, 3, 3, 0, 8], body, &tag), "{cipher:?} header");
        }
    }

    #[test]
    fn a_key_of_the_wrong_length_is_refused() {
        assert_eq!(Key::new(Cipher::Aes128Gcm, &[0; 32]).unwrap_err(), Failed);
        assert_eq!(Key::new(Cipher::Aes256Gcm, &[0; 16]).unwrap_err(), Failed);
    }
}
