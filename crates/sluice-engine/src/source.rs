//! Reading a chunk's bytes: a byte range of a plain file, a whole compressed file decompressed
//! on the fly, or standard input, delivered as large blocks by a reader thread so that reading
//! and decompressing overlap with converting. A small compressed file is decompressed where it
//! is walked instead: for thousands of them, a thread and a megabyte of buffers each cost more
//! than their bytes.

use crate::plan::{Chunk, Compression, Input, InputSource};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::sync::mpsc::{Receiver, SyncSender};

/// Bytes read per block.
pub const BLOCK: usize = 1 << 20;
/// Blocks in flight between the reader and the converter, per stream.
pub const BLOCKS_IN_FLIGHT: usize = 4;

/// Opens a chunk as a stream of decompressed bytes.
pub fn open_chunk(input: &Input, chunk: &Chunk) -> io::Result<Box<dyn Read + Send>> {
    let raw: Box<dyn Read + Send> = match &input.source {
        InputSource::Stdin => Box::new(io::stdin()),
        InputSource::File(path) => {
            let mut f = File::open(path)?;
            if chunk.start > 0 {
                f.seek(SeekFrom::Start(chunk.start))?;
            }
            match chunk.end {
                Some(end) => Box::new(f.take(end - chunk.start)),
                None => Box::new(f),
            }
        }
    };
    Ok(match input.compression {
        Compression::None => raw,
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(
            BLOCK, raw,
        ))),
        Compression::Zstd => Box::new(zstd::Decoder::new(raw)?),
    })
}

/// Compressed files up to this size are decompressed without a reader thread...
pub const INLINE_COMPRESSED: u64 = 64 << 10;
/// ...as long as they expand to no more than this (else the thread takes them, block by
/// block, and memory stays bounded whatever the ratio).
pub const INLINE_EXPANDED: usize = 4 << 20;

/// A small compressed file's whole content, decompressed here; `None` when the input is not a
/// small compressed file, or expands past [`INLINE_EXPANDED`].
pub fn decompress_small(input: &Input) -> io::Result<Option<Vec<u8>>> {
    let InputSource::File(path) = &input.source else {
        return Ok(None);
    };
    if input.compression == Compression::None || input.size > INLINE_COMPRESSED {
        return Ok(None);
    }
    let read;
    let raw: &[u8] = match &input.held {
        Some(held) => held,
        None => {
            read = std::fs::read(path)?;
            &read
        }
    };
    let decoder: Box<dyn Read> = match input.compression {
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(raw)),
        Compression::Zstd => Box::new(zstd::Decoder::with_buffer(raw)?),
        Compression::None => return Ok(None),
    };
    let mut out = Vec::with_capacity(raw.len() * 8);
    decoder
        .take(INLINE_EXPANDED as u64 + 1)
        .read_to_end(&mut out)?;
    Ok((out.len() <= INLINE_EXPANDED).then_some(out))
}

/// A message from the reader thread.
pub enum Block {
    Data(Vec<u8>),
    Error(io::Error),
}

/// Reads `reader` to the end in blocks, sending each; stops early when the receiver is gone.
/// Spent buffers come back through `recycle` so that steady state allocates nothing.
pub fn pump(mut reader: Box<dyn Read + Send>, tx: SyncSender<Block>, recycle: Receiver<Vec<u8>>) {
    loop {
        // A recycled buffer keeps its length, so only a new one is zeroed.
        let mut buf = recycle.try_recv().unwrap_or_default();
        buf.resize(BLOCK, 0);
        let mut filled = 0;
        let result = loop {
            match reader.read(&mut buf[filled..]) {
                Ok(0) => break Ok(()),
                Ok(k) => {
                    filled += k;
                    if filled == buf.len() {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        buf.truncate(filled);
        if let Err(e) = result {
            let _ = tx.send(Block::Error(e));
            return;
        }
        if filled == 0 {
            return;
        }
        if tx.send(Block::Data(buf)).is_err() {
            return;
        }
    }
}
