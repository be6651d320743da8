/* emu_globals.cc (test/gpu/emu) - the emulated thread and block indices */
#include "cuda_runtime.h"
thread_local emu_idx threadIdx, blockIdx;
emu_idx blockDim, gridDim;
std::barrier<> *emu_block_barrier;
std::barrier<> *emu_warp_barrier[32];
float emu_shfl_buf[32][32];

/* the pool: worker i runs thread i of each block (if the block has that many) */
static std::atomic<unsigned> emu_gen{0};
static std::atomic<int> emu_done{0};
static const std::function<void(int)> *emu_job;
static int	emu_job_n;
static std::vector<std::thread> *emu_pool;

static void
emu_worker(int i)
{
	unsigned	seen = 0;

	for (;;)
	{
		emu_gen.wait(seen);
		seen = emu_gen.load();
		if (i < emu_job_n)
			(*emu_job)(i);
		if (emu_done.fetch_add(1) + 1 == EMU_POOL)
			emu_done.notify_one();
	}
}

void
emu_run_block(int nthr, const std::function<void(int)> &job)
{
	if (!emu_pool)
	{
		emu_pool = new std::vector<std::thread>;
		for (int i = 0; i < EMU_POOL; i++)
			emu_pool->emplace_back(emu_worker, i);
		for (auto &t : *emu_pool)
			t.detach();
	}
	emu_job = &job;
	emu_job_n = nthr;
	emu_done.store(0);
	emu_gen.fetch_add(1);
	emu_gen.notify_all();
	for (int d; (d = emu_done.load()) != EMU_POOL;)
		emu_done.wait(d);
}
