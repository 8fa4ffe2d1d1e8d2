/*
 * The allocator's calls from C: new (bad geometry, bad policy), allocate with a goal and a
 * length, free, commit, the free count, check; misuse (NULL handles and pointers, double
 * frees, frees of free blocks, extents past the device); a full allocator.
 */
#include "common.h"

static void test_new(void) {
  extalloc_allocator *a = (extalloc_allocator *)1;
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_new(4096, 32768, 0, NULL, &a));
  CHECK(a == NULL);
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_new(1000, 32768, 1 << 20, NULL, &a));
  CHECK(last_error_has("block size"));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_new(4096, 1000, 1 << 20, NULL, &a));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT,
              extalloc_allocator_new(4096, 32768, 1 << 20, "no-such-preset", &a));
  CHECK(last_error_has("extalloc"));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_new(4096, 32768, 1 << 20, NULL, NULL));
  OK(extalloc_allocator_new(4096, 32768, 1 << 20, "ext4-2025", &a));
  OK(extalloc_allocator_destroy(a));
  OK(extalloc_allocator_destroy(NULL));
}

static void test_null_handles(void) {
  extalloc_extent e = {1, 1};
  uint64_t n;
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_allocate(NULL, 1, 0, 1, 0, &e));
  CHECK(last_error_has("alloc is NULL"));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_free(NULL, e));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_commit(NULL, &n));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_free_blocks(NULL, &n));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_check(NULL));
}

static void test_allocate_free_commit(void) {
  extalloc_allocator *a = NULL;
  const uint64_t blocks = 1 << 20;
  OK(extalloc_allocator_new(4096, 32768, blocks, NULL, &a));
  uint64_t free0 = 0, n = 0;
  OK(extalloc_allocator_free_blocks(a, &free0));
  CHECK(free0 == blocks);
  /* A free goal is honoured; an exact request gets all of its length. */
  extalloc_extent e = {0, 0}, f = {0, 0};
  OK(extalloc_allocator_allocate(a, 7, 5000, 16, 0, &e));
  CHECK(e.start == 5000 && e.len == 16);
  OK(extalloc_allocator_allocate(a, 7, EXTALLOC_NO_GOAL, 100, 1, &f));
  CHECK(f.len >= 1 && f.len <= 100);
  CHECK(f.start + f.len <= e.start || f.start >= e.start + e.len);
  OK(extalloc_allocator_free_blocks(a, &n));
  CHECK(n == free0 - e.len - f.len);
  /* Misuse, each refused and changing nothing. */
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_allocate(a, 7, 0, 0, 0, &e));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_allocate(a, 7, 0, 4, 8, &e));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_allocate(a, 7, blocks, 4, 0, &e));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_allocate(a, 7, 0, 4, 0, NULL));
  extalloc_extent never = {900000, 8}, past = {blocks - 1, 2}, zero = {10, 0};
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_free(a, never));
  CHECK(last_error_has("unallocated"));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_free(a, past));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_free(a, zero));
  OK(extalloc_allocator_check(a));
  /* Free, a double free before the commit, the commit counts what it made reusable. */
  OK(extalloc_allocator_free(a, e));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_allocator_free(a, e));
  CHECK(last_error_has("double free"));
  OK(extalloc_allocator_free(a, f));
  OK(extalloc_allocator_commit(a, &n));
  CHECK(n == e.len + f.len);
  OK(extalloc_allocator_commit(a, NULL));
  OK(extalloc_allocator_free_blocks(a, &n));
  CHECK(n == free0);
  OK(extalloc_allocator_check(a));
  OK(extalloc_allocator_destroy(a));
}

/* Fill a small allocator: NO_SPACE, then a free and a commit make room again. */
static void test_full(void) {
  extalloc_allocator *a = NULL;
  OK(extalloc_allocator_new(4096, 1024, 4096, NULL, &a));
  extalloc_extent got[64], e;
  int n = 0;
  extalloc_code code;
  while (n < 64 && (code = extalloc_allocator_allocate(a, 1, EXTALLOC_NO_GOAL, 128, 0, &got[n])) ==
                       EXTALLOC_OK)
    n++;
  CHECK(n == 32 && code == EXTALLOC_NO_SPACE);
  CHECK(last_error_has("no space"));
  OK(extalloc_allocator_free(a, got[3]));
  /* Freed but not committed: not yet reusable. */
  EXPECT_CODE(EXTALLOC_NO_SPACE, extalloc_allocator_allocate(a, 1, EXTALLOC_NO_GOAL, 128, 0, &e));
  OK(extalloc_allocator_commit(a, NULL));
  OK(extalloc_allocator_allocate(a, 1, EXTALLOC_NO_GOAL, 128, 0, &e));
  CHECK(e.start == got[3].start && e.len == 128);
  OK(extalloc_allocator_check(a));
  OK(extalloc_allocator_destroy(a));
}

int main(int argc, char **argv) {
  setup(argc, argv);
  test_new();
  test_null_handles();
  test_allocate_free_commit();
  test_full();
  return finish("test_allocator");
}
