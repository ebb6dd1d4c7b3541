//! Placing a list of tensors into buffers of a bounded size: the plan behind a buffer type's
//! default `alloc_buffer_n` (ggml 0.26 allocates a context's tensors through it).

/// One buffer of the plan: tensors `first..last` of the list, `size` bytes in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub size: usize,
    pub first: usize,
    pub last: usize,
}

/// Splits tensors needing `sizes[i]` bytes each (already padded to the buffer type's
/// alignment; 0 for tensors that take no memory of their own) into consecutive runs, each
/// starting a new buffer when adding the next tensor would exceed `max_size`. A tensor larger
/// than `max_size` gets a buffer of its own, which the buffer type may still refuse. Tensors
/// of size 0 join the run they fall in; when no tensor needs memory there is no chunk.
pub fn plan(sizes: &[usize], max_size: usize) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let (mut size, mut first) = (0usize, 0usize);
    for (i, &s) in sizes.iter().enumerate() {
        if size > 0 && size.saturating_add(s) > max_size {
            chunks.push(Chunk {
                size,
                first,
                last: i,
            });
            (size, first) = (s, i);
        } else {
            size = size.saturating_add(s);
        }
    }
    if size > 0 {
        chunks.push(Chunk {
            size,
            first,
            last: sizes.len(),
        });
    }
    chunks
}

/// Bytes the plan allocates in all.
pub fn total(chunks: &[Chunk]) -> usize {
    chunks.iter().map(|c| c.size).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(size: usize, first: usize, last: usize) -> Chunk {
        Chunk { size, first, last }
    }

    #[test]
    fn everything_fits_one_buffer() {
        assert_eq!(plan(&[32, 0, 64], usize::MAX), vec![c(96, 0, 3)]);
    }

    #[test]
    fn a_full_buffer_starts_the_next() {
        assert_eq!(
            plan(&[64, 64, 64, 32], 128),
            vec![c(128, 0, 2), c(96, 2, 4)]
        );
    }

    #[test]
    fn a_tensor_over_the_limit_gets_its_own_buffer() {
        assert_eq!(
            plan(&[32, 256, 32], 128),
            vec![c(32, 0, 1), c(256, 1, 2), c(32, 2, 3)]
        );
        assert_eq!(plan(&[256], 128), vec![c(256, 0, 1)]);
    }

    #[test]
    fn nothing_to_allocate_is_no_buffer() {
        assert!(plan(&[], 128).is_empty());
        assert!(plan(&[0, 0], 128).is_empty());
        // zero-size tensors before the first sized one ride along with it
        assert_eq!(plan(&[0, 0, 32], 128), vec![c(32, 0, 3)]);
        assert_eq!(total(&plan(&[64, 64, 64], 128)), 192);
    }
}
