/*
 * Blobs by key: extalloc_volume_put_key replaces the key's blob, extalloc_volume_get_key
 * and extalloc_volume_find_key find it, extalloc_volume_delete_key deletes it; bad keys are refused with the code the header
 * gives; a key names one blob after a reopen; threads putting one key leave one blob
 * under it, and a get beside them reads one whole blob.
 */
#include "common.h"

#include <pthread.h>
#include <unistd.h>

static void fill_with(uint8_t *buf, size_t len, uint8_t byte) { memset(buf, byte, len); }

static const uint8_t *k(const char *s) { return (const uint8_t *)s; }

/* The blobs whose attribute is `key`. */
static int count_under(extalloc_volume *vol, const char *key) {
  uint64_t ids[64];
  size_t count = 0;
  OK(extalloc_volume_list(vol, ids, 64, &count));
  int n = 0;
  for (size_t i = 0; i < count; i++) {
    char attr[EXTALLOC_MAX_ATTR_BYTES];
    size_t len = 0;
    OK(extalloc_volume_attr(vol, ids[i], (uint8_t *)attr, sizeof attr, &len));
    if (len == strlen(key) && memcmp(attr, key, len) == 0) n++;
  }
  return n;
}

static void test_replace_and_reopen(void) {
  char *path = scratch_path("keyed.vol");
  extalloc_volume *vol = NULL;
  OK(extalloc_volume_create(path, 64u << 20, &vol));
  uint8_t buf[50000], got[50000];
  uint64_t first, second, found, plain;
  size_t len = 0;
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_get_key(vol, k("a"), 1, got, sizeof got, &len));
  CHECK(last_error_has("no blob under the key \"a\""));
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_find_key(vol, k("a"), 1, &found));
  fill_with(buf, 40000, 1);
  OK(extalloc_volume_put_key(vol, k("a"), 1, buf, 40000, &first));
  OK(extalloc_volume_put(vol, buf, 10, &plain));
  fill_with(buf, 30000, 2);
  OK(extalloc_volume_put_key(vol, k("a"), 1, buf, 30000, &second));
  CHECK(second != first);
  OK(extalloc_volume_find_key(vol, k("a"), 1, &found));
  CHECK(found == second);
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_get(vol, first, got, sizeof got, &len));
  /* A size query, then the read. */
  EXPECT_CODE(EXTALLOC_BUFFER_TOO_SMALL, extalloc_volume_get_key(vol, k("a"), 1, NULL, 0, &len));
  CHECK(len == 30000);
  OK(extalloc_volume_get_key(vol, k("a"), 1, got, sizeof got, &len));
  CHECK(len == 30000 && memcmp(got, buf, len) == 0);
  /* An empty blob under a key reads back empty. */
  OK(extalloc_volume_put_key(vol, k("empty"), 5, NULL, 0, &found));
  OK(extalloc_volume_get_key(vol, k("empty"), 5, NULL, 0, &len));
  CHECK(len == 0);
  OK(extalloc_volume_sync(vol));
  OK(extalloc_volume_close(vol));
  vol = NULL;
  OK(extalloc_volume_open(path, &vol));
  CHECK(count_under(vol, "a") == 1);
  fill_with(buf, 20000, 3);
  OK(extalloc_volume_put_key(vol, k("a"), 1, buf, 20000, &found));
  CHECK(count_under(vol, "a") == 1 && count_under(vol, "empty") == 1);
  OK(extalloc_volume_get_key(vol, k("a"), 1, got, sizeof got, &len));
  CHECK(len == 20000 && got[0] == 3 && got[19999] == 3);
  OK(extalloc_volume_get(vol, plain, got, sizeof got, &len));
  CHECK(len == 10);
  /* Deleted by key: the key names nothing after, a second delete finds nothing. */
  uint64_t deleted = 0;
  OK(extalloc_volume_delete_key(vol, k("a"), 1, &deleted));
  CHECK(deleted == found && count_under(vol, "a") == 0);
  EXPECT_CODE(EXTALLOC_NOT_FOUND, extalloc_volume_delete_key(vol, k("a"), 1, &deleted));
  CHECK(last_error_has("no blob under the key \"a\""));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_delete_key(vol, k(""), 0, &deleted));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_delete_key(vol, k("a"), 1, NULL));
  OK(extalloc_volume_close(vol));
  unlink(path);
  free(path);
}

static void test_bad_keys(void) {
  char *path = scratch_path("keyed-bad.vol");
  extalloc_volume *vol = NULL;
  OK(extalloc_volume_create(path, 16u << 20, &vol));
  uint8_t big[EXTALLOC_MAX_ATTR_BYTES + 1], got[16];
  memset(big, 'k', sizeof big);
  uint64_t id;
  size_t len;
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put_key(vol, k("x"), 0, got, 1, &id));
  CHECK(last_error_has("the key is empty"));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put_key(vol, NULL, 0, got, 1, &id));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put_key(vol, NULL, 3, got, 1, &id));
  CHECK(last_error_has("key is NULL"));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put_key(vol, big, sizeof big, got, 1, &id));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put_key(vol, k("x"), 1, NULL, 4, &id));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put_key(vol, k("x"), 1, got, 1, NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_put_key(NULL, k("x"), 1, got, 1, &id));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_find_key(vol, k(""), 0, &id));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_find_key(vol, big, sizeof big, &id));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_find_key(vol, k("x"), 1, NULL));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_get_key(vol, k(""), 0, got, 16, &len));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_get_key(vol, k("x"), 1, NULL, 16, &len));
  EXPECT_CODE(EXTALLOC_INVALID_ARGUMENT, extalloc_volume_get_key(vol, k("x"), 1, got, 16, NULL));
  size_t count = 9;
  OK(extalloc_volume_list(vol, NULL, 0, &count));
  CHECK(count == 0); /* the refusals put nothing */
  /* The longest key is accepted. */
  OK(extalloc_volume_put_key(vol, big, EXTALLOC_MAX_ATTR_BYTES, got, 1, &id));
  uint64_t found = 0;
  OK(extalloc_volume_find_key(vol, big, EXTALLOC_MAX_ATTR_BYTES, &found));
  CHECK(found == id);
  OK(extalloc_volume_close(vol));
  unlink(path);
  free(path);
}

enum { THREADS = 4, PER_THREAD = 20, BLOB = 12000 };

struct worker {
  extalloc_volume *vol;
  int index;
  int bad;
};

/* Puts blobs of one repeated byte under one key and reads the key back: every read is one
 * blob whole (all its bytes alike, its whole length). */
static void *work(void *arg) {
  struct worker *w = arg;
  uint8_t buf[BLOB], got[BLOB];
  for (int i = 0; i < PER_THREAD; i++) {
    uint64_t id;
    fill_with(buf, BLOB, (uint8_t)(w->index * PER_THREAD + i + 1));
    if (extalloc_volume_put_key(w->vol, k("shared"), 6, buf, BLOB, &id) != EXTALLOC_OK) w->bad++;
    size_t len = 0;
    if (extalloc_volume_get_key(w->vol, k("shared"), 6, got, sizeof got, &len) != EXTALLOC_OK ||
        len != BLOB)
      w->bad++;
    for (size_t j = 1; j < len; j++)
      if (got[j] != got[0]) {
        w->bad++;
        break;
      }
  }
  return NULL;
}

static void test_threads(void) {
  char *path = scratch_path("keyed-threads.vol");
  extalloc_volume *vol = NULL;
  OK(extalloc_volume_create(path, 64u << 20, &vol));
  pthread_t threads[THREADS];
  struct worker workers[THREADS];
  for (int t = 0; t < THREADS; t++) {
    workers[t] = (struct worker){.vol = vol, .index = t};
    CHECK(pthread_create(&threads[t], NULL, work, &workers[t]) == 0);
  }
  for (int t = 0; t < THREADS; t++) {
    CHECK(pthread_join(threads[t], NULL) == 0);
    CHECK(workers[t].bad == 0);
  }
  CHECK(count_under(vol, "shared") == 1);
  OK(extalloc_volume_close(vol));
  unlink(path);
  free(path);
}

int main(int argc, char **argv) {
  setup(argc, argv);
  test_replace_and_reopen();
  test_bad_keys();
  test_threads();
  return finish("test_keyed");
}
