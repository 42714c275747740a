#!/usr/bin/env node
// Exactly-once copier: kafkajs (producer.transaction(), transaction.sendOffsets; no
// KIP-447 group metadata). Contract: ../copier_common.py.
//
// kafkajs never retries EndTxn or AddOffsetsToTxn itself: a failed commit/abort reaches
// this code, which aborts if it can and otherwise starts a new producer (InitProducerId
// fences the old epoch and aborts its open transaction).
'use strict'
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')
const kafkajsVersion = require('kafkajs/package.json').version

function parseArgs () {
  const a = { attempt: 1, abortRate: 0.125, maxBatch: 200, seed: Date.now() }
  const names = { '--bootstrap': 'bootstrap', '--input': 'input', '--output': 'output', '--group': 'group',
    '--txn-id': 'txnId', '--attempt': 'attempt', '--status': 'status', '--abort-rate': 'abortRate',
    '--max-batch': 'maxBatch', '--seed': 'seed' }
  const argv = process.argv.slice(2)
  for (let i = 0; i < argv.length; i += 2) {
    const k = names[argv[i]]
    if (!k) throw new Error('unknown argument ' + argv[i])
    a[k] = ['attempt', 'maxBatch', 'seed'].includes(k) ? Number(argv[i + 1])
      : k === 'abortRate' ? Number(argv[i + 1]) : argv[i + 1]
  }
  for (const k of ['bootstrap', 'input', 'output', 'group', 'txnId', 'status']) {
    if (!a[k]) throw new Error('missing --' + k)
  }
  return a
}

// mulberry32: a small seeded PRNG
function rng (seed) {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6D2B79F5) >>> 0
    let t = s
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

function log (msg) { console.log(new Date().toISOString().slice(11, 23) + ' ' + msg) }

class Status {
  constructor (a) {
    this.path = a.status
    this.attempt = a.attempt
    this.seq = 0
    this.abortRate = a.abortRate
    this.rnd = rng(a.seed)
    this.d = { client: 'kafkajs', version: 'kafkajs ' + kafkajsVersion, attempt: a.attempt, commits: 0, aborts: 0,
      error_aborts: 0, errors: 0, committed: {}, aborted: {}, last_error: null, started: Date.now() / 1000 }
    this.write()
  }

  nextTxn () {
    this.seq++
    return [this.attempt + '.' + this.seq, this.rnd() < this.abortRate ? 'abort' : 'commit']
  }

  committed (tag, n) { this.d.commits++; this.d.committed[tag] = n; this.write() }
  aborted (tag, n) { this.d.aborts++; this.d.aborted[tag] = n; this.write() }
  error (what, err, aborted) {
    this.d.errors++
    if (aborted) this.d.error_aborts++
    this.d.last_error = what + ': ' + (err && (err.type || err.name)) + ' ' + (err && err.message)
    log('ERROR ' + this.d.last_error)
    this.write()
  }

  write () {
    fs.writeFileSync(this.path + '.tmp', JSON.stringify(this.d))
    fs.renameSync(this.path + '.tmp', this.path)
  }
}

// The runner's --secure and --auth (EOS_SECURITY, see ../copier_common.py): TLS, SASL or both.
function secure () {
  if (!process.env.EOS_SECURITY) return {}
  const s = JSON.parse(process.env.EOS_SECURITY)
  const read = f => fs.readFileSync(f, 'utf8')
  const out = {}
  if (s.cafile) out.ssl = s.certfile ? { ca: [read(s.cafile)], cert: read(s.certfile), key: read(s.keyfile) } : { ca: [read(s.cafile)] }
  if (s.mechanism) out.sasl = { mechanism: s.mechanism.toLowerCase(), username: s.username, password: s.password }
  return out
}

async function main () {
  const a = parseArgs()
  const st = new Status(a)
  const kafka = new Kafka({ clientId: 'eos-kafkajs-' + a.attempt, brokers: [a.bootstrap], logLevel: logLevel.WARN,
    retry: { retries: 10, initialRetryTime: 300, maxRetryTime: 5000 }, ...secure() })
  const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

  let producer = null
  async function newProducer () {
    if (producer) {
      try { await producer.disconnect() } catch (e) { log('producer disconnect: ' + e.message) }
    }
    for (;;) {
      const p = kafka.producer({ transactionalId: a.txnId, idempotent: true, maxInFlightRequests: 1,
        transactionTimeout: 30000 })
      try {
        await p.connect() // InitProducerId
        log('producer connected (InitProducerId ok)')
        producer = p
        return
      } catch (e) {
        st.error('producer connect', e, false)
        try { await p.disconnect() } catch (e2) {}
        await sleep(500)
      }
    }
  }
  await newProducer()

  const consumer = kafka.consumer({ groupId: a.group, sessionTimeout: 10000, heartbeatInterval: 2000,
    readUncommitted: false, retry: { retries: 20 } })
  consumer.on(consumer.events.CRASH, e => log('consumer crash: ' + (e.payload && e.payload.error && e.payload.error.message)))
  for (;;) {
    try {
      await consumer.connect()
      await consumer.subscribe({ topics: [a.input], fromBeginning: true })
      break
    } catch (e) {
      st.error('consumer connect', e, false)
      await sleep(500)
    }
  }

  const admin = kafka.admin()
  const local = {} // partition -> offset of the last commit this process saw confirmed

  // Where to resume after a failed transaction whose outcome may be unknown (e.g. the
  // connection closed during EndTxn: the commit may have happened). The new producer's
  // InitProducerId has completed or aborted it by now, so the group's committed offset
  // is the truth; it is never behind what this process saw committed.
  async function committedOffset (topic, partition) {
    for (;;) {
      try {
        await admin.connect()
        const res = await admin.fetchOffsets({ groupId: a.group, topics: [topic] })
        const p = res[0].partitions.find(x => x.partition === partition)
        let off = p && Number(p.offset) >= 0 ? BigInt(p.offset) : 0n
        if (local[partition] !== undefined && local[partition] > off) off = local[partition]
        return off.toString()
      } catch (e) {
        st.error('fetchOffsets', e, false)
        await sleep(500)
      }
    }
  }

  // One transaction; returns 'committed', 'aborted' (on purpose: resume at the first
  // record of the chunk) or 'failed' (resume at the group's committed offset).
  async function txn (topic, partition, msgs) {
    const [tag, plan] = st.nextTxn()
    let t
    try {
      t = await producer.transaction()
      await t.send({ topic: a.output, messages: msgs.map(m => ({ key: m.key, value: m.value,
        headers: { src: partition + ':' + m.offset, txn: tag, plan } })) })
      const next = (BigInt(msgs[msgs.length - 1].offset) + 1n).toString()
      await t.sendOffsets({ consumerGroupId: a.group, topics: [{ topic, partitions: [{ partition, offset: next }] }] })
      if (plan === 'abort') {
        await t.abort()
        st.aborted(tag, msgs.length)
        return 'aborted'
      }
      await t.commit()
      local[partition] = BigInt(next)
      st.committed(tag, msgs.length)
      return 'committed'
    } catch (e) {
      st.error('txn ' + tag, e, true)
      try {
        if (t && t.isActive()) await t.abort()
        else await newProducer()
      } catch (e2) {
        st.error('abort ' + tag, e2, false)
        await newProducer()
      }
      return 'failed'
    }
  }

  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      const msgs = batch.messages
      let i = 0
      while (i < msgs.length) {
        if (!isRunning() || isStale()) return
        const n = 1 + Math.floor(st.rnd() * a.maxBatch)
        const chunk = msgs.slice(i, i + n)
        const r = await txn(batch.topic, batch.partition, chunk)
        if (r === 'committed') {
          resolveOffset(chunk[chunk.length - 1].offset)
          i += chunk.length
          await heartbeat()
        } else {
          // back to the committed offset
          const offset = r === 'aborted' ? chunk[0].offset : await committedOffset(batch.topic, batch.partition)
          log(`${r}: seek ${batch.topic}[${batch.partition}] to ${offset}`)
          consumer.seek({ topic: batch.topic, partition: batch.partition, offset })
          return
        }
      }
    }
  })
}

main().catch(e => { console.error(e); process.exit(1) })
