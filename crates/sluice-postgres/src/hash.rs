//! PostgreSQL's hash of an integer partition key, so that sluice can route rows to the
//! partitions of a table partitioned by hash on the client, as the server would.
//!
//! The server hashes each key column with its type's extended hash function and the seed
//! `HASH_PARTITION_SEED`, combines the columns' hashes with `hash_combine64` (starting from 0),
//! and puts the row in the partition whose remainder the result leaves when divided by the
//! partition's modulus (`compute_partition_hash_value`, `satisfies_hash_partition`). For
//! `int2`, `int4` and `int8` the extended hash is Bob Jenkins' lookup3 on one 32-bit word
//! (`hash_uint32_extended`); `int8` first folds its high half into its low half so that equal
//! values of the three types hash alike. The tests compare with the server's own
//! `satisfies_hash_partition` (`crates/sluice/tests/stage.rs`).

use sluice_core::destination::HashFunction;

/// PostgreSQL's hash of an integer partition key (any of `int2`, `int4`, `int8`).
pub const PARTITION_HASH: HashFunction = HashFunction {
    name: "postgresql integer partition hash",
    hash: partition_hash,
};

/// `HASH_PARTITION_SEED` in PostgreSQL's `partition.h`.
const SEED: u64 = 0x7A5B_2236_7996_DCFD;

/// The row hash of a one-column integer key, as `compute_partition_hash_value` computes it.
pub fn partition_hash(key: i64) -> u64 {
    combine(0, hash_int8_extended(key, SEED))
}

/// `hashint8extended`: the high half folded into the low (complemented for a negative value,
/// so that an `int8` that fits in 32 bits hashes as the `int4` of the same value).
fn hash_int8_extended(value: i64, seed: u64) -> u64 {
    let low = value as u32;
    let high = (value >> 32) as u32;
    let folded = if value >= 0 { low ^ high } else { low ^ !high };
    hash_u32_extended(folded, seed)
}

/// `hash_combine64`.
fn combine(a: u64, b: u64) -> u64 {
    a ^ b
        .wrapping_add(0x49a0_f4dd_15e5_a8e3)
        .wrapping_add(a << 54)
        .wrapping_add(a >> 7)
}

/// `hash_uint32_extended`: lookup3 on one word, with a 64-bit seed.
fn hash_u32_extended(k: u32, seed: u64) -> u64 {
    let init = 0x9e37_79b9u32.wrapping_add(4).wrapping_add(3_923_095);
    let (mut a, mut b, mut c) = (init, init, init);
    if seed != 0 {
        a = a.wrapping_add((seed >> 32) as u32);
        b = b.wrapping_add(seed as u32);
        mix(&mut a, &mut b, &mut c);
    }
    a = a.wrapping_add(k);
    finish(&mut a, &mut b, &mut c);
    ((b as u64) << 32) | c as u64
}

/// lookup3's `mix`.
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

/// lookup3's `final`.
fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_int8_that_fits_in_32_bits_hashes_as_its_int4() {
        for v in [0i64, 1, -1, 42, -42, i32::MAX as i64, i32::MIN as i64] {
            assert_eq!(
                hash_int8_extended(v, SEED),
                hash_u32_extended(v as i32 as u32, SEED)
            );
        }
        assert_ne!(partition_hash(1 << 32), partition_hash(0));
    }
}
