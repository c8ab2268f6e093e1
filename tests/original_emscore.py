# ruff: noqa
"""EMScore's ORIGINAL scoring code, vendored as an independent reference for the video-metric tests.

Copied verbatim from github.com/ShiYaya/emscore at 20bce0ae234b3caeea3357c023c4d085c9a55bf0 (MIT License,
Copyright (c) 2021 Yaya Shi), reformatted by ruff: `emscore/utils.py` (`normalize_matrix`, and `encode_text`
through `em_cos_score`) and `emscore/scorer.py` (`EMScorer`). Only these changes, each marked `[pacs-pp]`:
- the imports of `clip`, `cv2` and `PIL` are dropped (video decoding and `clip.load` are not used: frame features come
  in through EMScore's own `vid_feat_cache`, the model and tokenizer are injected into `EMScorer`);
- `multiprocessing.Pool` is replaced by an in-process map with the same interface (no forking inside pytest).
"""

import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from functools import partial
from itertools import chain
from math import log

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from tqdm import tqdm


class Pool:  # [pacs-pp] in-process stand-in for multiprocessing.Pool
    def __init__(self, processes=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def map(self, function, iterable):
        return list(map(function, iterable))


def normalize_matrix(A):
    assert len(A.shape) == 2
    A_norm = torch.linalg.norm(A, dim=-1, keepdim=True)
    return A / A_norm


def encode_text(vid_caps, model, tokenizer, idf_dict, device):
    text_input = tokenizer(vid_caps).to(device=device)
    with torch.no_grad():
        text_features = model.encode_text(text_input, local=True).float()
    text_features /= text_features.norm(dim=-1, keepdim=True)

    # For special tokens, use [SOS] and [EOS]
    txt_len = text_input.argmax(dim=-1)
    mask = torch.zeros_like(text_input)
    for i in range(len(mask)):
        mask[i][0 : txt_len[i] + 1] = 1

    # For special tokens, only use [EOS]
    # txt_len = text_input.argmax(dim=-1)
    # mask = torch.zeros_like(text_input)
    # for i in range(len(mask)):
    #     mask[i][1:txt_len[i]+1] = 1

    # # For special tokens, don't use [SOS] and [EOS]
    # txt_len = text_input.argmax(dim=-1)
    # mask = torch.zeros_like(text_input)
    # for i in range(len(mask)):
    #     mask[i][1:txt_len[i]] = 1

    idf_weights = torch.tensor([[idf_dict[int(i)] for i in a] for a in text_input.cpu()])

    return text_features, mask, idf_weights


def process(a, tokenizer=None):
    if tokenizer is not None:
        a = tokenizer(a)[0].tolist()
    return set(a)


def get_idf_dict(arr, tokenizer, nthreads=4):
    """
    Returns mapping from word piece index to its inverse document frequency.


    Args:
        - :param: `arr` (list of str) : sentences to process.
        - :param: `tokenizer` : a BERT tokenizer corresponds to `model`.
        - :param: `nthreads` (int) : number of CPU threads to use
    """
    idf_count = Counter()
    num_docs = len(arr)

    process_partial = partial(process, tokenizer=tokenizer)

    with Pool(nthreads) as p:
        idf_count.update(chain.from_iterable(p.map(process_partial, arr)))

    idf_dict = defaultdict(lambda: log((num_docs + 1) / (1)))
    idf_dict.update({idx: log((num_docs + 1) / (c + 1)) for (idx, c) in idf_count.items()})
    return idf_dict


def refs_greedy_cos(ref_embedding, ref_masks, ref_idf, hyp_embedding, hyp_masks, hyp_idf, return_matched_idx):
    """
    Compute greedy matching based on cosine similarity.

    Args:
        - :param: `ref_embedding` (torch.Tensor):
                   embeddings of reference sentences, BxKxd,
                   B: batch size, K: longest length, d: bert dimenison.
        - :param: `ref_masks` (torch.LongTensor): BxKxK, BERT attention mask for
                   reference sentences.
        - :param: `hyp_embedding` (torch.Tensor):
                   embeddings of candidate sentences, BxKxd,
                   B: batch size, K: longest length, d: bert dimenison
        - :param: `hyp_masks` (torch.LongTensor): BxKxK, BERT attention mask for
                   candidate sentences.
    """
    # ref_embedding and hyp_embedding are aleady L2-normalized.

    batch_size = ref_embedding.size(0)
    sim = torch.bmm(hyp_embedding, ref_embedding.transpose(1, 2))
    masks = torch.bmm(hyp_masks.unsqueeze(2).float(), ref_masks.unsqueeze(1).float())
    masks = masks.expand(batch_size, -1, -1).contiguous().view_as(sim)
    masks = masks.float().to(sim.device)
    sim = sim * masks

    word_precision, matched_indices = sim.max(dim=2)
    word_recall = sim.max(dim=1)[0]

    hyp_idf.div_(hyp_idf.sum(dim=1, keepdim=True))
    ref_idf.div_(ref_idf.sum(dim=1, keepdim=True))
    precision_scale = hyp_idf.to(word_precision.device)
    recall_scale = ref_idf.to(word_recall.device)

    P = (word_precision * precision_scale).sum(dim=1)
    R = (word_recall * recall_scale).sum(dim=1)
    F = 2 * P * R / (P + R)

    if return_matched_idx:
        return P, R, F, matched_indices
    else:
        return P, R, F, torch.zeros_like(P)


def vid_greedy_cos(ref_embedding, ref_masks, hyp_embedding, hyp_masks, hyp_idf, return_matched_idx):
    """
    Compute greedy matching based on cosine similarity.

    Args:
        - :param: `ref_embedding` (torch.Tensor):
                   embeddings of reference sentences, BxKxd,
                   B: batch size, K: longest length, d: bert dimenison.
        - :param: `ref_masks` (torch.LongTensor): BxKxK, BERT attention mask for
                   reference sentences.
        - :param: `hyp_embedding` (torch.Tensor):
                   embeddings of candidate sentences, BxKxd,
                   B: batch size, K: longest length, d: bert dimenison
        - :param: `hyp_masks` (torch.LongTensor): BxKxK, BERT attention mask for
                   candidate sentences.
    """
    # ref_embedding and hyp_embedding are aleady L2-normalized.

    batch_size = ref_embedding.size(0)
    sim = torch.bmm(hyp_embedding, ref_embedding.transpose(1, 2))
    masks = torch.bmm(hyp_masks.unsqueeze(2).float(), ref_masks.unsqueeze(1).float())
    masks = masks.expand(batch_size, -1, -1).contiguous().view_as(sim)
    masks = masks.float().to(sim.device)
    sim = sim * masks

    word_precision, matched_indices = sim.max(dim=2)
    word_recall = sim.max(dim=1)[0]

    hyp_idf.div_(hyp_idf.sum(dim=1, keepdim=True))
    precision_scale = hyp_idf.to(word_precision.device)
    P = (word_precision * precision_scale).sum(dim=1)
    R = word_recall.sum(dim=1) / ref_masks.sum(dim=1)
    F = 2 * P * R / (P + R)

    if return_matched_idx:
        return P, R, F, matched_indices
    else:
        return P, R, F, torch.zeros_like(P)


def em_cos_score(
    model,
    refs,
    hyps,
    ori_cands,
    ori_refs,
    vids,
    vid_feat_cache,
    tokenizer,
    idf_dict,
    preprocess,
    verbose=True,
    batch_size=64,
    device="cuda:0",
    return_matched_idx=False,
):
    """
    Compute EMScore.

    Args:
        - :param: `model` : a BERT model in `pytorch_pretrained_bert`
        - :param: `refs` (list of str): reference sentences
        - :param: `hyps` (list of str): candidate sentences
        - :param: `tokenzier` : a BERT tokenizer corresponds to `model`
        - :param: `verbose` (bool): turn on intermediate status update
        - :param: `batch_size` (int): bert score processing batch size
        - :param: `device` (str): device to use, e.g. 'cpu' or 'cuda'
    """

    refs_preds_local = []
    refs_pred_matched_idxs = []
    refs_preds_global = []

    vid_preds_local = []
    vid_pred_matched_idxs = []
    vid_preds_global = []

    """process text"""

    def dedup_and_sort(l):
        return sorted(list(set(l)), key=lambda x: len(x.split(" ")), reverse=True)

    sentences = dedup_and_sort(refs + hyps)
    embs = []
    iter_range = range(0, len(sentences), batch_size)
    if verbose:
        print("computing text embedding.")
        iter_range = tqdm(iter_range)
    text_local_stats_dict = dict()
    text_global_stats_dict = dict()
    for batch_start in iter_range:
        sen_batch = sentences[batch_start : batch_start + batch_size]
        embs, masks, text_idfs = encode_text(sen_batch, model, tokenizer, idf_dict, device=device)
        embs = embs.cpu()
        masks = masks.cpu()
        for i, sen in enumerate(sen_batch):
            sequence_len = masks[i].sum().item()

            # For special tokens, use [SOS] and [EOS]
            local_emb = embs[i, 0:sequence_len]
            global_emb = embs[i, sequence_len - 1]
            idf = text_idfs[i, 0:sequence_len]

            # For special tokens, don't use any
            # local_emb = embs[i, 1:sequence_len+1]
            # global_emb = embs[i, sequence_len+1]
            # idf = text_idfs[i, 1:sequence_len+1]

            # For special tokens, only use [EOS]
            # local_emb = embs[i, 1:sequence_len+1]
            # global_emb = embs[i, sequence_len]
            # idf = text_idfs[i, 1:sequence_len+1]

            text_local_stats_dict[sen] = (local_emb, idf)
            text_global_stats_dict[sen] = global_emb

    """process video"""
    if vids:
        if vid_feat_cache:
            ori_vids = vids
            vid_local_stats_dict = vid_feat_cache
            vid_global_stats_dict = dict()
            for vid in vid_local_stats_dict:
                image_features = vid_local_stats_dict[vid]
                vid_feature = normalize_matrix(torch.mean(image_features, dim=0, keepdim=True)).squeeze()
                vid_global_stats_dict[vid] = vid_feature
        else:
            ori_vids = vids  # video paths list
            unique_vids = list(set(vids))
            if verbose:
                print("computing vid embedding.")
            vid_local_stats_dict = dict()
            vid_global_stats_dict = dict()
            for vid_i in tqdm(range(len(unique_vids))):
                video_file = unique_vids[vid_i]
                image_features, vid_feature = encode_video(video_file, preprocess, model, batch_size=512, device=device)
                # vid_name = video_file.split('/')[-1][:-4]
                vid_local_stats_dict[video_file] = image_features.cpu()
                vid_global_stats_dict[video_file] = vid_feature.cpu()

    def pad_local_batch_stats(sen_batch, stats_dict, device):
        stats = [stats_dict[s] for s in sen_batch]
        emb, idf = zip(*stats)
        emb = [e.to(device) for e in emb]
        lens = [e.size(0) for e in emb]
        emb_pad = pad_sequence(emb, batch_first=True, padding_value=0.0)
        idf_pad = pad_sequence(idf, batch_first=True)

        def length_to_mask(lens):
            lens = torch.tensor(lens, dtype=torch.long)
            max_len = max(lens)
            base = torch.arange(max_len, dtype=torch.long).expand(len(lens), max_len)
            return base < lens.unsqueeze(1)

        pad_mask = length_to_mask(lens).to(device)
        return emb_pad, pad_mask, idf_pad

    def pad_vid_local_batch_stats(sen_batch, stats_dict, device):
        stats = [stats_dict[s] for s in sen_batch]
        emb = stats
        emb = [e.to(device) for e in emb]
        lens = [e.size(0) for e in emb]
        emb_pad = pad_sequence(emb, batch_first=True, padding_value=0.0)

        def length_to_mask(lens):
            lens = torch.tensor(lens, dtype=torch.long)
            max_len = max(lens)
            base = torch.arange(max_len, dtype=torch.long).expand(len(lens), max_len)
            return base < lens.unsqueeze(1)

        pad_mask = length_to_mask(lens).to(device)
        return emb_pad, pad_mask

    def pad_global_batch_stats(sen_batch, stats_dict, device):
        stats = [stats_dict[s] for s in sen_batch]
        emb = stats
        emb = [e.to(device) for e in emb]
        emb_pad = pad_sequence(emb, batch_first=True, padding_value=0.0)
        return emb_pad

    """ if references are avaliable """
    if refs:
        iter_range = range(0, len(hyps), batch_size)
        if verbose:
            print("computing greedy matching, references as ground truth.")
            iter_range = tqdm(iter_range)

        with torch.no_grad():
            for batch_start in iter_range:
                batch_hyps = hyps[batch_start : batch_start + batch_size]
                hyp_stats_local = pad_local_batch_stats(batch_hyps, text_local_stats_dict, device)
                hyp_stats_global = pad_global_batch_stats(batch_hyps, text_global_stats_dict, device)

                batch_refs = refs[batch_start : batch_start + batch_size]
                ref_stats_local = pad_local_batch_stats(batch_refs, text_local_stats_dict, device)
                ref_stats_global = pad_global_batch_stats(batch_refs, text_global_stats_dict, device)

                P, R, F1, matched_indices = refs_greedy_cos(*ref_stats_local, *hyp_stats_local, return_matched_idx)
                refs_preds_local.append(torch.stack((P, R, F1), dim=-1).cpu())
                refs_pred_matched_idxs.append(matched_indices)

                refs_s_cogr = torch.bmm(
                    hyp_stats_global.unsqueeze(1), ref_stats_global.unsqueeze(1).transpose(1, 2)
                ).squeeze()
                refs_preds_global.append(refs_s_cogr)

    """ if video used as ground truth """
    if vids:
        if verbose:
            print("computing greedy matching, video as ground truth.")
        iter_range = range(0, len(ori_cands), batch_size)
        with torch.no_grad():
            for batch_start in iter_range:
                batch_ori_hyp = ori_cands[batch_start : batch_start + batch_size]
                ori_hyp_stats_local = pad_local_batch_stats(batch_ori_hyp, text_local_stats_dict, device)
                ori_hyp_stats_global = pad_global_batch_stats(batch_ori_hyp, text_global_stats_dict, device)

                batch_ori_vids = ori_vids[batch_start : batch_start + batch_size]
                ori_vids_stats_local = pad_vid_local_batch_stats(batch_ori_vids, vid_local_stats_dict, device)
                ori_vids_stats_global = pad_global_batch_stats(batch_ori_vids, vid_global_stats_dict, device)

                P, R, F1, matched_indices = vid_greedy_cos(
                    *ori_vids_stats_local, *ori_hyp_stats_local, return_matched_idx
                )
                vid_preds_local.append(torch.stack((P, R, F1), dim=-1).cpu())
                vid_pred_matched_idxs.append(matched_indices)

                vid_s_cogr = torch.bmm(
                    ori_hyp_stats_global.unsqueeze(1), ori_vids_stats_global.unsqueeze(1).transpose(1, 2)
                ).squeeze()
                vid_preds_global.append(vid_s_cogr)

    results = dict()
    """ if references are avaliable """
    if refs:
        refs_preds_local = torch.cat(refs_preds_local, dim=0).cpu()
        if len(refs) != 1:
            refs_preds_global = torch.cat(refs_preds_global, dim=0).cpu()
        else:
            refs_preds_global = refs_preds_global[0].cpu()
        results["refs_result"] = {}
        results["refs_result"]["figr"] = refs_preds_local
        results["refs_result"]["cogr"] = refs_preds_global
        results["refs_result"]["matched_indices"] = torch.cat(refs_pred_matched_idxs)

    """ if video used as ground truth """
    if vids:
        vid_preds_local = torch.cat(vid_preds_local, dim=0).cpu()
        if len(vids) != 1:
            vid_preds_global = torch.cat(vid_preds_global, dim=0).cpu()
        else:
            vid_preds_global = vid_preds_global[0].cpu()
        results["vid_result"] = {}
        results["vid_result"]["figr"] = vid_preds_local
        results["vid_result"]["cogr"] = vid_preds_global
        results["vid_result"]["matched_indices"] = torch.cat(vid_pred_matched_idxs)

    return results


class EMScorer:
    """
    EMScore Scorer Object.
    """

    def __init__(self, vid_feat_cache=None, device=None, model=None, tokenizer=None):  # [pacs-pp] model, tokenizer

        self.vid_feat_cache = vid_feat_cache
        self.model, self.tokenizer = model, tokenizer

        if device is None:
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        else:
            self.device = device

    def score(
        self, cands, refs, vids=None, verbose=True, batch_size=64, nthreads=4, idf=True, return_matched_idx=False
    ):
        """
        Args:
            - :param: `cands` (list of str): candidate sentences
            - :param: `refs` (list of list of str): reference sentences

        Return:
            - :param: `(P, R, F)`: each is of shape (N); N = number of input
                        candidate reference pairs. if returning hashcode, the
                        output will be ((P, R, F), hashcode). If a candidate have
                        multiple references, the returned score of this candidate is
                        the *best* score among all references.
        """

        # [pacs-pp] was: clip.load("ViT-B/32") and clip.tokenize; here the model and tokenizer are injected.
        self._model = self.model
        self._tokenizer = self.tokenizer
        self._image_preprocess = None

        ref_group_boundaries = None
        ori_cands, ori_refs = cands, refs
        # if reference are avaliable, and there are multiple references for each candidata caption
        if refs and not isinstance(refs[0], str):
            ref_group_boundaries = []
            cands, refs = [], []
            count = 0
            for cand, ref_group in zip(ori_cands, ori_refs):
                cands += [cand] * len(ref_group)
                refs += ref_group
                ref_group_boundaries.append((count, count + len(ref_group)))
                count += len(ref_group)

        if not idf:
            idf_dict = defaultdict(lambda: 1.0)
        elif isinstance(idf, dict):
            if verbose:
                print("using predefined IDF dict...")
            idf_dict = idf
        else:
            if verbose:
                print("preparing IDF dict...")
            start = time.perf_counter()
            idf_corpus = refs if refs else cands
            idf_dict = get_idf_dict(idf_corpus, self._tokenizer, nthreads=nthreads)
            # max token_id are eos token id
            # set idf of eos token are mean idf value
            idf_dict[max(list(idf_dict.keys()))] = sum(list(idf_dict.values())) / len(list(idf_dict.values()))
            if verbose:
                print("done in {:.2f} seconds".format(time.perf_counter() - start))

        if verbose:
            print("calculating EMScore scores...")
            time_start = time.perf_counter()

        results = em_cos_score(
            self._model,
            refs,
            cands,
            ori_cands,
            ori_refs,
            vids,
            self.vid_feat_cache,
            self._tokenizer,
            idf_dict,
            self._image_preprocess,
            verbose=verbose,
            device=self.device,
            batch_size=batch_size,
            return_matched_idx=return_matched_idx,
        )

        final_results = {}
        if refs:
            refs_all_local_preds = results["refs_result"]["figr"]
            refs_all_global_preds = results["refs_result"]["cogr"]
            if ref_group_boundaries is not None:
                max_preds_local = []
                for start, end in ref_group_boundaries:
                    max_preds_local.append(refs_all_local_preds[start:end].max(dim=0)[0])
                refs_all_local_preds = torch.stack(max_preds_local, dim=0)

                max_preds_global = []
                for start, end in ref_group_boundaries:
                    max_preds_global.append(refs_all_global_preds[start:end].max())
                refs_all_global_preds = torch.stack(max_preds_global, dim=0)

            refs_P, refs_R, refs_F = (
                refs_all_local_preds[..., 0],
                refs_all_local_preds[..., 1],
                refs_all_local_preds[..., 2],
            )  # P, R, F

            refs_results = {}
            refs_results["figr_P"] = refs_P
            refs_results["figr_R"] = refs_R
            refs_results["figr_F"] = refs_F
            refs_results["cogr"] = refs_all_global_preds
            refs_results["full_P"] = (refs_results["figr_P"] + refs_results["cogr"]) / 2
            refs_results["full_R"] = (refs_results["figr_R"] + refs_results["cogr"]) / 2
            refs_results["full_F"] = (refs_results["figr_F"] + refs_results["cogr"]) / 2
            # refs_results['refs_matched_indices'] = results['refs_result']['matched_indices']
            final_results["EMScore(X,X*)"] = refs_results

        if vids:
            vid_all_local_preds = results["vid_result"]["figr"]
            vid_all_global_preds = results["vid_result"]["cogr"]
            vid_P, vid_R, vid_F = (
                vid_all_local_preds[..., 0],
                vid_all_local_preds[..., 1],
                vid_all_local_preds[..., 2],
            )  # P, R, F

            vid_results = {}
            vid_results["figr_P"] = vid_P
            vid_results["figr_R"] = vid_R
            vid_results["figr_F"] = vid_F
            vid_results["cogr"] = vid_all_global_preds
            vid_results["full_P"] = (vid_results["figr_P"] + vid_results["cogr"]) / 2
            vid_results["full_R"] = (vid_results["figr_R"] + vid_results["cogr"]) / 2
            vid_results["full_F"] = (vid_results["figr_F"] + vid_results["cogr"]) / 2
            # vid_results['vid_matched_indices'] = results['vid_result']['matched_indices']
            final_results["EMScore(X,V)"] = vid_results

        if refs and vids:
            vid_refs_result = {}
            vid_refs_result["figr_P"] = (
                final_results["EMScore(X,V)"]["figr_P"] + final_results["EMScore(X,X*)"]["figr_P"]
            ) / 2
            vid_refs_result["figr_R"] = (
                final_results["EMScore(X,V)"]["figr_R"] + final_results["EMScore(X,X*)"]["figr_R"]
            ) / 2
            vid_refs_result["figr_F"] = (
                final_results["EMScore(X,V)"]["figr_F"] + final_results["EMScore(X,X*)"]["figr_F"]
            ) / 2
            vid_refs_result["cogr"] = (
                final_results["EMScore(X,V)"]["cogr"] + final_results["EMScore(X,X*)"]["cogr"]
            ) / 2
            vid_refs_result["full_P"] = (vid_refs_result["figr_P"] + vid_refs_result["cogr"]) / 2
            vid_refs_result["full_R"] = (vid_refs_result["figr_R"] + vid_refs_result["cogr"]) / 2
            vid_refs_result["full_F"] = (vid_refs_result["figr_F"] + vid_refs_result["cogr"]) / 2
            final_results["EMScore(X,V,X*)"] = vid_refs_result

        if verbose:
            time_diff = time.perf_counter() - time_start
            print(f"done in {time_diff:.2f} seconds, {len(cands) / time_diff:.2f} sentences/sec")

        return final_results
