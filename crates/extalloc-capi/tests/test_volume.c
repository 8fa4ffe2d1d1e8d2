/*
 * The volume's calls from C: each call's success, its misuse (NULL handles and pointers,
 * wrong ids, buffers too small, a path that exists, a file that holds no volume, a second
 * open), ENOSPC on a small device, a reopen after close with every synced blob intact, and
 * blobs put under keys whose index is rebuilt from the attributes after a reopen.
 */
#include "common.h"

#include <stdint.h>
#include <unistd.h>

/* Blob i's bytes: a pattern of its own, so a blob read for another shows. */
static void fill(uint8_t *buf, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 9));
}

static void test_codes(void) {
  CHECK(strcmp(extalloc_code_name(EXTALLOC_OK), "EXTALLOC_OK") == 0);
  CHECK(strcmp(extalloc_code_name(EXTALLOC_NO_SPACE), "EXTALLOC_NO_SPACE") == 0);
  CHECK(strcmp(extalloc_code_name(EXTALLOC_PANIC), "EXTALLOC_PANIC") == 0);
  CHECK(strcmp(extalloc_code_name(EXTALLOC_FILE_TOO_BIG), "EXTALLOC_FILE_TOO_BIG") == 0);
  CHECK(strcmp(extalloc_code_name(EXTALLOC_WRONG_STATE), "EXTALLOC_WRONG_STATE") == 0);
  CHECK(EXTALLOC_PANIC == 10 && EXTALLOC_FILE_TOO_BIG == 11 && EXTALLOC_WRONG_STATE == 12);
  /* A cut message: the length returned is the whole one, the buffer ends with a NUL. */
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_sync(NULL));
  char small[4] = {1, 1, 1, 1};
  size_t n = extalloc_last_error(small, sizeof small);
  CHECK(n > 3 && small[3] == '\0');
  CHECK(extalloc_last_error(NULL, 0) == n);
  CHECK(extalloc_last_error_code() == EXTALLOC_INVALID_ARGUMENT);
}

static void test_null_arguments(void) {
  extalloc_volume *vol = (extalloc_volume *)1;
  uint64_t id, ids[4], size;
  size_t len, count;
  uint8_t buf[8];
  extalloc_statfs st;
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_create(NULL, 64 << 20, &vol));
  CHECK(vol == NULL && last_error_has("path is NULL"));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_create("", 64 << 20, &vol));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_create("x", 64 << 20, NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_open(NULL, &vol));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_open("x", NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put(NULL, buf, 1, &id));
  CHECK(last_error_has("vol is NULL"));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_size(NULL, 1, &size));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_get(NULL, 1, buf, 8, &len));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_delete(NULL, 1));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_list(NULL, ids, 4, &count));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_statfs(NULL, &st));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_sync(NULL));
  OK(extalloc_volume_close(NULL));
  CHECK(extalloc_last_error(NULL, 0) == 0);
}

/* Calls on a live volume with NULL out-pointers, NULL buffers, ids it does not hold. */
static void test_misuse_on_live_volume(extalloc_volume *vol) {
  uint64_t id, size;
  size_t len, count;
  uint8_t buf[8];
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put(vol, buf, 8, NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put(vol, NULL, 8, &id));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_size(vol, 1, NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_get(vol, 1, buf, 8, NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_get(vol, 1, NULL, 8, &len));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_list(vol, NULL, 4, &count));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_list(vol, NULL, 0, NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_statfs(vol, NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put_attr(vol, NULL, 3, buf, 8, &id));
  CHECK(last_error_has("attr is NULL"));
  static uint8_t big[EXTALLOC_MAX_ATTR_BYTES + 1];
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put_attr(vol, big, sizeof big, buf, 8, &id));
  CHECK(last_error_has("1025"));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_attr(vol, 1, buf, 8, NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_attr(vol, 1, NULL, 8, &len));
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_attr(vol, 987654, buf, 8, &len));
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_size(vol, 987654, &size));
  CHECK(last_error_has("987654"));
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_get(vol, 987654, buf, 8, &len));
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_delete(vol, 987654));
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_delete(vol, UINT64_MAX));
}

static void test_create_refusals(void) {
  extalloc_volume *vol = NULL;
  char *path = scratch_path("refused.vol");
  /* Too small for a volume: refused before the file is made. */
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_create(path, 4096, &vol));
  CHECK(vol == NULL && access(path, F_OK) != 0);
  /* A path that exists is never touched. */
  FILE *f = fopen(path, "w");
  fputs("not a volume", f);
  fclose(f);
  EXPECT_CODE(EXTALLOC_EXISTS, extalloc_volume_create(path, 64 << 20, &vol));
  CHECK(vol == NULL);
  /* A file that holds no volume: as it is, and grown to a volume's size. */
  EXPECT_CODE(EXTALLOC_CORRUPT, extalloc_volume_open(path, &vol));
  CHECK(truncate(path, 64 << 20) == 0);
  EXPECT_CODE(EXTALLOC_CORRUPT, extalloc_volume_open(path, &vol));
  CHECK(vol == NULL);
  unlink(path);
  EXPECT_CODE(EXTALLOC_IO, extalloc_volume_open(path, &vol));
  free(path);
}

/* Put, size, get (the size query, a buffer too small, an exact one), list, statfs, delete. */
static void test_round_trip(extalloc_volume *vol) {
  enum { N = 5 };
  size_t sizes[N] = {1, 4096, 4097, 300000, 2u << 20};
  uint64_t ids[N];
  extalloc_statfs before, after;
  OK(extalloc_volume_statfs(vol, &before));
  for (int i = 0; i < N; i++) {
    uint8_t *data = malloc(sizes[i]);
    fill(data, sizes[i], (unsigned)i);
    OK(extalloc_volume_put(vol, data, sizes[i], &ids[i]));
    free(data);
  }
  uint64_t empty;
  OK(extalloc_volume_put(vol, NULL, 0, &empty));
  OK(extalloc_volume_statfs(vol, &after));
  CHECK(after.blobs == before.blobs + N + 1);
  CHECK(after.free_blocks < before.free_blocks && after.block_size == 4096);
  /* A put holds nothing beyond its blocks: the blobs took exactly their blocks. */
  CHECK(after.prealloc_blocks == 0);
  uint64_t blocks = 0;
  for (int i = 0; i < N; i++) blocks += (sizes[i] + 4095) / 4096;
  CHECK(before.free_blocks - after.free_blocks == blocks);
  for (int i = 0; i < N; i++) {
    uint64_t size = 0;
    size_t len = 0;
    OK(extalloc_volume_size(vol, ids[i], &size));
    CHECK(size == sizes[i]);
    EXPECT_CODE(EXTALLOC_BUFFER_TOO_SMALL, extalloc_volume_get(vol, ids[i], NULL, 0, &len));
    CHECK(len == sizes[i]);
    uint8_t *got = malloc(sizes[i]), *want = malloc(sizes[i]);
    fill(want, sizes[i], (unsigned)i);
    if (sizes[i] > 1) {
      EXPECT_CODE(EXTALLOC_BUFFER_TOO_SMALL,
                  extalloc_volume_get(vol, ids[i], got, sizes[i] - 1, &len));
      CHECK(len == sizes[i]);
    }
    OK(extalloc_volume_get(vol, ids[i], got, sizes[i], &len));
    CHECK(len == sizes[i] && memcmp(got, want, len) == 0);
    free(got);
    free(want);
  }
  size_t len = 99;
  OK(extalloc_volume_get(vol, empty, NULL, 0, &len));
  CHECK(len == 0);
  /* The count query, a list cut short (filled as far as it goes), a whole list. */
  size_t count = 0;
  EXPECT_CODE(EXTALLOC_BUFFER_TOO_SMALL, extalloc_volume_list(vol, NULL, 0, &count));
  CHECK(count == after.blobs);
  uint64_t *listed = calloc(count, sizeof *listed);
  EXPECT_CODE(EXTALLOC_BUFFER_TOO_SMALL, extalloc_volume_list(vol, listed, 2, &count));
  CHECK(count == after.blobs && listed[0] != 0 && listed[2] == 0);
  OK(extalloc_volume_list(vol, listed, count, &count));
  for (size_t i = 1; i < count; i++) CHECK(listed[i - 1] < listed[i]);
  /* The same ids a page at a time (pages of 3, then 1), until next is 0. */
  for (size_t round = 0; round < 2; round++) {
    size_t cap = round == 0 ? 3 : 1;
    uint64_t page[3] = {0}, next = 0, after = 0;
    size_t seen = 0, n = 99;
    do {
      OK(extalloc_volume_list_page(vol, after, page, cap, &n, &next));
      CHECK(n <= cap);
      for (size_t i = 0; i < n; i++) CHECK(seen + i < count && page[i] == listed[seen + i]);
      seen += n;
      CHECK(next == 0 || next > after);
      after = next;
    } while (next != 0);
    CHECK(seen == count);
  }
  {
    uint64_t page[2], next = 7;
    size_t n = 7;
    OK(extalloc_volume_list_page(vol, listed[count - 1], page, 2, &n, &next));
    CHECK(n == 0 && next == 0);
    EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_list_page(vol, 0, page, 0, &n, &next));
    EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_list_page(vol, 0, NULL, 2, &n, &next));
    EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_list_page(vol, 0, page, 2, NULL, &next));
    EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_list_page(vol, 0, page, 2, &n, NULL));
    EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_list_page(NULL, 0, page, 2, &n, &next));
    CHECK(n == 0 && next == 0);
  }
  free(listed);
  /* Delete: gone at once, twice is NOT_FOUND. */
  OK(extalloc_volume_delete(vol, empty));
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_delete(vol, empty));
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_get(vol, empty, NULL, 0, &len));
  OK(extalloc_volume_delete(vol, ids[4]));
  OK(extalloc_volume_sync(vol));
  OK(extalloc_volume_statfs(vol, &after));
  CHECK(after.blobs == before.blobs + N - 1);
}

/* A small device fills: the put that fails leaves no blob; a delete and a sync make room. */
static void test_no_space(void) {
  char *path = scratch_path("small.vol");
  extalloc_volume *vol = NULL;
  OK(extalloc_volume_create(path, 16u << 20, &vol));
  size_t chunk = 1u << 20;
  uint8_t *data = malloc(chunk);
  fill(data, chunk, 7);
  uint64_t ids[64];
  int put = 0;
  extalloc_code code = EXTALLOC_OK;
  while (put < 64 && (code = extalloc_volume_put(vol, data, chunk, &ids[put])) == EXTALLOC_OK)
    put++;
  CHECK(code == EXTALLOC_NO_SPACE);
  CHECK(last_error_has("no space"));
  CHECK(put >= 4 && put < 16);
  size_t count = 0;
  extalloc_volume_list(vol, NULL, 0, &count);
  CHECK(count == (size_t)put);
  OK(extalloc_volume_sync(vol));
  OK(extalloc_volume_delete(vol, ids[0]));
  OK(extalloc_volume_delete(vol, ids[1]));
  OK(extalloc_volume_sync(vol));
  uint64_t again;
  OK(extalloc_volume_put(vol, data, chunk, &again));
  /* Every blob that stayed reads back whole. */
  uint8_t *got = malloc(chunk);
  for (int i = 2; i < put; i++) {
    size_t len = 0;
    OK(extalloc_volume_get(vol, ids[i], got, chunk, &len));
    CHECK(len == chunk && memcmp(got, data, chunk) == 0);
  }
  OK(extalloc_volume_close(vol));
  free(got);
  free(data);
  unlink(path);
  free(path);
}

/* Synced blobs survive a close and an open; a second open of an open file is BUSY. */
static void test_reopen(void) {
  char *path = scratch_path("reopen.vol");
  extalloc_volume *vol = NULL, *other = NULL;
  OK(extalloc_volume_create(path, 64u << 20, &vol));
  EXPECT_CODE(EXTALLOC_BUSY, extalloc_volume_open(path, &other));
  CHECK(other == NULL);
  test_misuse_on_live_volume(vol);
  test_round_trip(vol);
  enum { N = 40 };
  uint64_t ids[N];
  uint8_t buf[20000], got[20000];
  for (int i = 0; i < N; i++) {
    fill(buf, 100 + (size_t)i * 450, 100u + (unsigned)i);
    OK(extalloc_volume_put(vol, buf, 100 + (size_t)i * 450, &ids[i]));
    if (i % 10 == 9) OK(extalloc_volume_sync(vol));
  }
  for (int i = 0; i < N; i += 3) OK(extalloc_volume_delete(vol, ids[i]));
  OK(extalloc_volume_sync(vol));
  OK(extalloc_volume_close(vol));
  vol = NULL;
  OK(extalloc_volume_open(path, &vol));
  for (int i = 0; i < N; i++) {
    size_t len = 0, want = 100 + (size_t)i * 450;
    if (i % 3 == 0) {
      EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_get(vol, ids[i], got, sizeof got, &len));
      continue;
    }
    fill(buf, want, 100u + (unsigned)i);
    OK(extalloc_volume_get(vol, ids[i], got, sizeof got, &len));
    CHECK(len == want && memcmp(got, buf, want) == 0);
  }
  OK(extalloc_volume_close(vol));
  unlink(path);
  free(path);
}

/* Blobs under keys: put with an attribute, the index rebuilt from list and attr after a
 * reopen; a size query for an attribute; a blob put without one has an empty attribute. */
static void test_keys(void) {
  char *path = scratch_path("keys.vol");
  extalloc_volume *vol = NULL;
  OK(extalloc_volume_create(path, 64u << 20, &vol));
  enum { N = 12 };
  uint8_t buf[30000], got[30000];
  char key[32];
  uint64_t plain;
  for (int i = 0; i < N; i++) {
    uint64_t id;
    int n = snprintf(key, sizeof key, "photos/%04d.jpg", i);
    fill(buf, 1000 + (size_t)i * 2000, 300u + (unsigned)i);
    OK(extalloc_volume_put_attr(vol, (const uint8_t *)key, (size_t)n, buf,
                                1000 + (size_t)i * 2000, &id));
  }
  OK(extalloc_volume_put(vol, buf, 10, &plain));
  OK(extalloc_volume_sync(vol));
  OK(extalloc_volume_close(vol));
  vol = NULL;
  OK(extalloc_volume_open(path, &vol));
  uint64_t ids[N + 1];
  size_t count = 0, len = 0;
  OK(extalloc_volume_list(vol, ids, N + 1, &count));
  CHECK(count == N + 1);
  int found = 0;
  for (size_t k = 0; k < count; k++) {
    char attr[EXTALLOC_MAX_ATTR_BYTES + 1];
    if (ids[k] == plain) {
      OK(extalloc_volume_attr(vol, ids[k], NULL, 0, &len));
      CHECK(len == 0);
      continue;
    }
    EXPECT_CODE(EXTALLOC_BUFFER_TOO_SMALL, extalloc_volume_attr(vol, ids[k], NULL, 0, &len));
    CHECK(len == strlen("photos/0000.jpg"));
    OK(extalloc_volume_attr(vol, ids[k], (uint8_t *)attr, sizeof attr, &len));
    attr[len] = '\0';
    int i = -1;
    CHECK(sscanf(attr, "photos/%d.jpg", &i) == 1 && i >= 0 && i < N);
    size_t want = 1000 + (size_t)i * 2000, n = 0;
    fill(buf, want, 300u + (unsigned)i);
    OK(extalloc_volume_get(vol, ids[k], got, sizeof got, &n));
    CHECK(n == want && memcmp(got, buf, want) == 0);
    found++;
  }
  CHECK(found == N);
  OK(extalloc_volume_close(vol));
  unlink(path);
  free(path);
}

int main(int argc, char **argv) {
  setup(argc, argv);
  test_codes();
  test_null_arguments();
  test_create_refusals();
  test_no_space();
  test_reopen();
  test_keys();
  return finish("test_volume");
}
