/*
 * Handles shared by threads: four threads put, read back and delete blobs on one volume
 * while a fifth syncs, and allocate and free on one allocator; each thread's last error is
 * its own. Then the volume is reopened and every blob the threads kept reads back.
 */
#include "common.h"

#include <pthread.h>
#include <unistd.h>

enum { THREADS = 4, PER_THREAD = 50 };

struct worker {
  extalloc_volume *vol;
  extalloc_allocator *alloc;
  int index;
  uint64_t kept[PER_THREAD];
  int nkept;
  int bad;
};

static void pattern(uint8_t *buf, size_t len, uint64_t seed) {
  for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(seed * 17u + i);
}

static void *work(void *arg) {
  struct worker *w = arg;
  uint8_t buf[9000], got[9000];
  for (int i = 0; i < PER_THREAD; i++) {
    size_t len = 1 + (size_t)((w->index * 977 + i * 131) % 9000);
    uint64_t seed = (uint64_t)w->index * 1000 + (uint64_t)i, id;
    pattern(buf, len, seed);
    if (extalloc_volume_put(w->vol, buf, len, &id) != EXTALLOC_OK) w->bad++;
    size_t n = 0;
    if (extalloc_volume_get(w->vol, id, got, sizeof got, &n) != EXTALLOC_OK || n != len ||
        memcmp(got, buf, len) != 0)
      w->bad++;
    if (i % 2 == 0) {
      if (extalloc_volume_delete(w->vol, id) != EXTALLOC_OK) w->bad++;
    } else {
      w->kept[w->nkept++] = id;
    }
    extalloc_extent e;
    if (extalloc_allocator_allocate(w->alloc, (uint64_t)w->index, EXTALLOC_NO_GOAL, 8, 1, &e) !=
            EXTALLOC_OK ||
        extalloc_allocator_free(w->alloc, e) != EXTALLOC_OK)
      w->bad++;
  }
  /* This thread's error stays its own while the others succeed. */
  if (extalloc_volume_delete(w->vol, UINT64_MAX - (uint64_t)w->index) != EXTALLOC_NOT_FOUND)
    w->bad++;
  usleep(1000);
  if (extalloc_last_error_code() != EXTALLOC_NOT_FOUND) w->bad++;
  return NULL;
}

static volatile int stop;

static void *syncer(void *arg) {
  while (!stop) {
    if (extalloc_volume_sync(arg) != EXTALLOC_OK) return (void *)1;
    usleep(2000);
  }
  return NULL;
}

int main(int argc, char **argv) {
  setup(argc, argv);
  char *path = scratch_path("threads.vol");
  extalloc_volume *vol = NULL;
  extalloc_allocator *alloc = NULL;
  OK(extalloc_volume_create(path, 64u << 20, &vol));
  OK(extalloc_allocator_new(4096, 32768, 1 << 18, NULL, &alloc));
  struct worker w[THREADS];
  pthread_t t[THREADS], s;
  pthread_create(&s, NULL, syncer, vol);
  for (int i = 0; i < THREADS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].vol = vol;
    w[i].alloc = alloc;
    w[i].index = i;
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK(w[i].bad == 0);
  }
  stop = 1;
  void *sync_failed = NULL;
  pthread_join(s, &sync_failed);
  CHECK(sync_failed == NULL);
  OK(extalloc_allocator_commit(alloc, NULL));
  OK(extalloc_allocator_check(alloc));
  OK(extalloc_allocator_destroy(alloc));
  OK(extalloc_volume_close(vol));
  vol = NULL;
  OK(extalloc_volume_open(path, &vol));
  size_t count = 0;
  EXPECT_CODE(EXTALLOC_BUFFER_TOO_SMALL, extalloc_volume_list(vol, NULL, 0, &count));
  CHECK(count == THREADS * PER_THREAD / 2);
  uint8_t buf[9000], got[9000];
  for (int i = 0; i < THREADS; i++) {
    for (int k = 0; k < w[i].nkept; k++) {
      int j = 2 * k + 1;
      size_t len = 1 + (size_t)((i * 977 + j * 131) % 9000), n = 0;
      pattern(buf, len, (uint64_t)i * 1000 + (uint64_t)j);
      OK(extalloc_volume_get(vol, w[i].kept[k], got, sizeof got, &n));
      CHECK(n == len && memcmp(got, buf, len) == 0);
    }
  }
  OK(extalloc_volume_close(vol));
  unlink(path);
  free(path);
  return finish("test_threads");
}
